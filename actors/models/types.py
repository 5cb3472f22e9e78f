"""The values a model call takes and returns.

A request is plain chat: system, user and assistant messages with text content, plus
per-request options. Every type validates itself on construction, so a bad request fails
in the caller's frame with a ``ValueError`` that names the field and the rule, before any
provider is contacted.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Role = Literal["system", "user", "assistant"]
ROLES: tuple[str, ...] = ("system", "user", "assistant")

FinishReason = Literal["stop", "length", "content_filter", "error", "cancelled"]
"""Why a stream ended.

``stop``: the model finished. ``length``: cut off at the output limit. ``content_filter``:
the provider withheld the rest. ``error``: the stream raised a ``ModelError``.
``cancelled``: the consumer closed or cancelled the stream before it finished.
"""


def _require(condition: bool, type_name: str, field: str, rule: str) -> None:
    if not condition:
        raise ValueError(f"{type_name}.{field}: {rule}")


class ChatMessage(msgspec.Struct, frozen=True):
    """One chat message: a role and its plain-text content."""

    role: Role
    """``system``, ``user`` or ``assistant``."""
    content: str
    """Non-blank plain text (providers such as Anthropic reject empty content)."""

    def __post_init__(self) -> None:
        _require(self.role in ROLES, "ChatMessage", "role", f"must be one of {', '.join(ROLES)}")
        _require(
            isinstance(self.content, str) and bool(self.content.strip()),
            "ChatMessage",
            "content",
            "must be non-empty text",
        )


class ChatOptions(msgspec.Struct, frozen=True):
    """Per-request options; ``None`` means the service's configured default."""

    max_tokens: int | None = None
    """Upper bound on output tokens."""
    temperature: float | None = None
    """Sampling temperature, 0 to 2."""
    thinking: bool = True
    """Whether the model may reason before answering. Compaction and routing requests
    pass ``False``; a service disables reasoning where its provider supports that."""
    timeout_s: float | None = None
    """Bound on the wait for the first chunk and for each later chunk."""

    def __post_init__(self) -> None:
        if self.max_tokens is not None:
            _require(
                isinstance(self.max_tokens, int) and self.max_tokens > 0,
                "ChatOptions",
                "max_tokens",
                "must be positive",
            )
        if self.temperature is not None:
            _require(
                0 <= self.temperature <= 2, "ChatOptions", "temperature", "must be between 0 and 2"
            )
        if self.timeout_s is not None:
            _require(self.timeout_s > 0, "ChatOptions", "timeout_s", "must be positive")


class ChatRequest(msgspec.Struct, frozen=True):
    """What a service receives: at least one message, and the options."""

    messages: tuple[ChatMessage, ...]
    options: ChatOptions = ChatOptions()

    def __post_init__(self) -> None:
        _require(len(self.messages) > 0, "ChatRequest", "messages", "must not be empty")
        for index, message in enumerate(self.messages):
            _require(
                isinstance(message, ChatMessage),
                "ChatRequest",
                f"messages[{index}]",
                "must be a ChatMessage",
            )
        _require(
            isinstance(self.options, ChatOptions), "ChatRequest", "options", "must be a ChatOptions"
        )


class Usage(msgspec.Struct, frozen=True):
    """Token counts, when the provider reports them (``None`` otherwise)."""

    input_tokens: int | None = None
    output_tokens: int | None = None


class ChatResult(msgspec.Struct, frozen=True):
    """How a stream ended: the finish reason and the usage."""

    finish_reason: FinishReason
    usage: Usage = Usage()


class ChatCompletion(msgspec.Struct, frozen=True):
    """A whole response collected from a stream (``LLMService.complete``)."""

    text: str
    finish_reason: FinishReason
    usage: Usage = Usage()
