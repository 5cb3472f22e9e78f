"""How the built-in model uses tools, as pure functions (``OfflineLLM`` calls them).

- A request with tools whose current user turn has no tool result yet calls the tool
  whose name and description share the most content words with the user's message
  (none shares a word: no call, a plain answer). Its arguments fill each required
  property: text gets the user's message, numbers 0, booleans false.
- A request whose turn already has tool results answers the user's message from those
  results first, then the rest of the request, by quoting the best-matching lines.

``extract_compacted_tool_result`` is never chosen by words: re-reading a reclaimed
result is a decision about the transcript, not about the question.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from .extractive import answer_from_context, content_lines, keywords
from .types import ChatMessage, ChatRequest, ToolCall, ToolSpec

NOT_BY_WORDS = frozenset({"extract_compacted_tool_result"})

_NAME_PARTS = re.compile(r"[_\-]+")


def _turn(messages: Sequence[ChatMessage]) -> tuple[int, ChatMessage] | None:
    """The index and message of the last user message."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return index, messages[index]
    return None


def _tool_words(tool: ToolSpec) -> set[str]:
    return keywords(_NAME_PARTS.sub(" ", tool.name)) | keywords(tool.description)


def _arguments(tool: ToolSpec, text: str) -> str:
    properties: dict[str, Any] = tool.parameters.get("properties", {})
    filled: dict[str, Any] = {}
    for name in tool.parameters.get("required", []):
        kind = properties.get(name, {}).get("type")
        filled[name] = {"integer": 0, "number": 0, "boolean": False}.get(kind, text)
    return msgspec.json.encode(filled).decode()


def choose_tool_call(request: ChatRequest) -> ToolCall | None:
    """The one tool call the built-in model makes for ``request``, or ``None``."""
    found = _turn(request.messages)
    if not request.tools or found is None:
        return None
    index, user = found
    if any(message.role == "tool" for message in request.messages[index + 1 :]):
        return None
    wanted = keywords(user.content)
    scored = [
        (len(_tool_words(tool) & wanted), -position, tool)
        for position, tool in enumerate(request.tools)
        if tool.name not in NOT_BY_WORDS
    ]
    scored = [entry for entry in scored if entry[0] > 0]
    if not scored:
        return None
    tool = max(scored, key=lambda entry: entry[:2])[2]
    digest = hashlib.sha1(f"{index}:{user.content}:{tool.name}".encode()).hexdigest()[:12]
    return ToolCall(f"call_{digest}", tool.name, _arguments(tool, user.content))


def answer_after_tools(request: ChatRequest) -> str | None:
    """The answer from the turn's tool results, or ``None`` when the turn has none."""
    found = _turn(request.messages)
    if found is None:
        return None
    index, user = found
    results = [m for m in request.messages[index + 1 :] if m.role == "tool"]
    if not results:
        return None
    others = [m for m in request.messages[:index] if m.role in ("user", "tool")]
    lines = [line for m in others for line in content_lines(m.content)]
    lines += [line for m in results for line in content_lines(_readable(m.content))]
    return answer_from_context(user.content, lines)


def _readable(content: str) -> str:
    """A JSON result as ``key: value`` lines, so its words can be quoted; text as is."""
    try:
        value = msgspec.json.decode(content)
    except msgspec.DecodeError:
        return content
    return "\n".join(_flatten(value))


def _flatten(value: Any, prefix: str = "") -> list[str]:
    if isinstance(value, dict):
        return [line for key, item in value.items() for line in _flatten(item, f"{prefix}{key} ")]
    if isinstance(value, list):
        if all(not isinstance(item, dict | list) for item in value):
            return _flatten(", ".join(str(item) for item in value), prefix)
        return [line for item in value for line in _flatten(item, prefix)]
    return [f"{prefix.strip()}: {value}" if prefix else str(value)]
