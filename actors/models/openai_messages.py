"""Chat messages in OpenAI's format (the ``openai`` package's typed dictionaries) and the
models' ``ChatMessage``, both ways.

Why both: a caller that keeps its conversation as OpenAI's typed dictionaries (the tools
agent's ``Conversation``) hands them to ``LLMService.stream`` as they are, and a provider
that speaks OpenAI's format (litellm) sends them verbatim: reasoning under the field the
model used, ``image_url`` blocks as stored, tool calls with their argument strings. A
service that reads messages as text (the offline model, scripted test doubles, a
recording) reads the same request as ``ChatMessage`` s (``chat_message``: text blocks
joined, ``image_url`` blocks its images, reasoning under either field).
``message_dict`` writes a ``ChatMessage`` in OpenAI's format (the request of a caller
that holds ``ChatMessage`` s).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .types import ChatMessage, ToolCall

REASONING_FIELDS = ("reasoning_content", "reasoning")
"""The fields a model's reasoning arrives under, and is written back under."""


def message_dict(message: ChatMessage) -> dict[str, Any]:
    """``message`` in OpenAI's chat format."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.images:
        out["content"] = [
            *([{"type": "text", "text": message.content}] if message.content else []),
            *({"type": "image_url", "image_url": {"url": url}} for url in message.images),
        ]
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
        if not message.content:
            out["content"] = None
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.reasoning is not None:
        out["reasoning_content"] = message.reasoning
    return out


def message_text(message: ChatMessage | Mapping[str, Any]) -> str:
    """The text of a message in either form (text blocks joined by a blank line)."""
    if isinstance(message, ChatMessage):
        return message.content
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n\n".join(
        block["text"]
        for block in content or ()
        if isinstance(block, Mapping) and isinstance(block.get("text"), str)
    )


def chat_message(message: Mapping[str, Any]) -> ChatMessage:
    """OpenAI's typed chat message read as a ``ChatMessage`` (``ValueError``, ``KeyError``
    or ``TypeError`` when it is not one)."""
    content = message.get("content")
    images: list[str] = []
    if isinstance(content, list):
        for block in content:
            if block.get("type") == "image_url":
                url = block["image_url"]
                images.append(url["url"] if isinstance(url, Mapping) else url)
    calls = tuple(
        ToolCall(c["id"], c["function"]["name"], c["function"].get("arguments") or "{}")
        for c in message.get("tool_calls") or ()
    )
    reasoning = next((message[f] for f in REASONING_FIELDS if message.get(f)), None)
    return ChatMessage(
        message["role"],
        message_text(message),
        tool_calls=calls,
        tool_call_id=message.get("tool_call_id"),
        reasoning=reasoning,
        images=tuple(images),
    )


def request_messages(
    messages: Sequence[ChatMessage | Mapping[str, Any]],
) -> tuple[tuple[ChatMessage, ...], tuple[dict[str, Any], ...]]:
    """A request's messages as ``ChatMessage`` s, and, when any was given in OpenAI's format,
    all of them in that format (the given dictionaries as they are); ``ValueError`` naming
    the message that is neither."""
    views: list[ChatMessage] = []
    given = False
    for index, message in enumerate(messages):
        if isinstance(message, ChatMessage):
            views.append(message)
            continue
        given = True
        try:
            views.append(chat_message(message))
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise ValueError(
                f"ChatRequest.messages[{index}]: must be a ChatMessage or an OpenAI chat "
                f"message ({error})"
            ) from None
    if not given:
        return tuple(views), ()
    dicts = tuple(
        message_dict(message) if isinstance(message, ChatMessage) else dict(message)
        for message in messages
    )
    return tuple(views), dicts
