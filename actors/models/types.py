"""The values a model call takes and returns.

A request is chat: system, user, assistant and tool messages, plus per-request options
and the tools the model may call. An assistant message may carry ``tool_calls``; each
tool result is a ``tool`` message linked to its call by ``tool_call_id`` (docs/tools.md).
Every type validates itself on construction, so a bad request fails in the caller's
frame with a ``ValueError`` that names the field and the rule, before any provider is
contacted.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")

FinishReason = Literal["stop", "length", "content_filter", "error", "cancelled"]
"""Why a stream ended.

``stop``: the model finished. ``length``: cut off at the output limit. ``content_filter``:
the provider withheld the rest. ``error``: the stream raised a ``ModelError``.
``cancelled``: the consumer closed or cancelled the stream before it finished.
"""


IMAGE_URL_PREFIXES = ("data:image/", "https://", "http://")
"""What a message's image may be (as ``UserQuery.images``; the models import no schemas)."""


def _require(condition: bool, type_name: str, field: str, rule: str) -> None:
    if not condition:
        raise ValueError(f"{type_name}.{field}: {rule}")


TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What providers accept as a function name (OpenAI: ``^[a-zA-Z0-9_-]{1,64}$``)."""


class ToolCall(msgspec.Struct, frozen=True):
    """One call the model asked for: its id, the tool's name and the JSON argument string."""

    id: str
    name: str
    arguments: str = "{}"
    """The arguments as the model wrote them (a JSON object as text), kept verbatim."""

    def __post_init__(self) -> None:
        _require(isinstance(self.id, str) and bool(self.id), "ToolCall", "id", "must be non-empty")
        _require(
            isinstance(self.name, str) and bool(self.name), "ToolCall", "name", "must be non-empty"
        )
        _require(isinstance(self.arguments, str), "ToolCall", "arguments", "must be a JSON string")


class ToolSpec(msgspec.Struct, frozen=True):
    """A tool as the model sees it: name, description and the JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    def __post_init__(self) -> None:
        _require(
            isinstance(self.name, str) and bool(TOOL_NAME.fullmatch(self.name)),
            "ToolSpec",
            "name",
            "must be 1-64 letters, digits, '_' or '-'",
        )
        _require(isinstance(self.description, str), "ToolSpec", "description", "must be text")


class ChatMessage(msgspec.Struct, frozen=True):
    """One chat message: a role and its plain-text content.

    An assistant message may carry ``tool_calls`` (then its content may be empty); a
    ``tool`` message is one tool result and names its call in ``tool_call_id``.
    ``reasoning`` is a model's reasoning content, written back verbatim across turns.
    The fields after ``content`` have defaults, so a two-field message decodes as before.
    """

    role: Role
    """``system``, ``user``, ``assistant`` or ``tool``."""
    content: str
    """Plain text, non-blank except for an assistant message with tool calls or a tool
    result (providers such as Anthropic reject empty content elsewhere)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The calls an assistant message asks for."""
    tool_call_id: str | None = None
    """The call a ``tool`` message answers."""
    reasoning: str | None = None
    """Reasoning content returned by the model, kept verbatim."""
    images: tuple[str, ...] = ()
    """A user message's images (data URLs or http(s) URLs), sent after its text as
    ``image_url`` content blocks."""

    def __post_init__(self) -> None:
        _require(self.role in ROLES, "ChatMessage", "role", f"must be one of {', '.join(ROLES)}")
        _require(
            not self.images or self.role == "user",
            "ChatMessage",
            "images",
            "only a user message carries images",
        )
        _require(
            all(isinstance(url, str) and url.startswith(IMAGE_URL_PREFIXES) for url in self.images),
            "ChatMessage",
            "images",
            "each must be a data:image/ URL or an http(s) URL",
        )
        _require(isinstance(self.content, str), "ChatMessage", "content", "must be non-empty text")
        may_be_blank = self.role == "tool" or (self.role == "assistant" and bool(self.tool_calls))
        _require(
            may_be_blank or bool(self.content.strip()),
            "ChatMessage",
            "content",
            "must be non-empty text",
        )
        _require(
            not self.tool_calls or self.role == "assistant",
            "ChatMessage",
            "tool_calls",
            "only an assistant message carries tool calls",
        )
        _require(
            (self.role == "tool") == (self.tool_call_id is not None),
            "ChatMessage",
            "tool_call_id",
            "a tool message needs one, other roles have none",
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
    tools: tuple[ToolSpec, ...] = ()
    """The tools the model may call; none: a plain chat request."""
    openai: tuple[dict[str, Any], ...] = ()
    """The same messages in OpenAI's format, when the caller gave them so (the typed
    dictionaries of a ``Conversation``): a service speaking that format sends these as
    they are, so nothing a ``ChatMessage`` does not model is lost; none: it writes
    ``messages`` in that format."""

    def __post_init__(self) -> None:
        _require(len(self.messages) > 0, "ChatRequest", "messages", "must not be empty")
        _require(
            not self.openai or len(self.openai) == len(self.messages),
            "ChatRequest",
            "openai",
            "must hold one OpenAI message per message, or none",
        )
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
        names = [tool.name for tool in self.tools if isinstance(tool, ToolSpec)]
        _require(len(names) == len(self.tools), "ChatRequest", "tools", "must be ToolSpecs")
        _require(len(set(names)) == len(names), "ChatRequest", "tools", "names must be unique")


class Usage(msgspec.Struct, frozen=True):
    """Token counts, when the provider reports them (``None`` otherwise), and the cost."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    """The provider's total, else input plus output when both are known (``total``)."""
    reasoning_tokens: int | None = None
    """The output tokens spent reasoning, when the provider says."""
    cost_usd: float | None = None
    """What the call cost, when the service knows the model's price (litellm's table)."""

    @property
    def total(self) -> int | None:
        """Tokens of the whole call: what docs/tools.md's automatic compaction compares."""
        if self.total_tokens is not None:
            return self.total_tokens
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens


class ChatResult(msgspec.Struct, frozen=True):
    """How a stream ended: the finish reason and the usage."""

    finish_reason: FinishReason
    usage: Usage = Usage()
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls the response asked for (finish reason ``stop``)."""
    reasoning: str | None = None
    """The response's reasoning content, when the provider returns it."""
    reasoning_field: str | None = None
    """The field the reasoning came under (``reasoning_content`` or ``reasoning``): a caller
    keeping OpenAI messages writes it back under the same one."""


class ChatCompletion(msgspec.Struct, frozen=True):
    """A whole response collected from a stream (``LLMService.complete``)."""

    text: str
    finish_reason: FinishReason
    usage: Usage = Usage()
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
