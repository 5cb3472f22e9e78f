"""Tools through litellm: tools in OpenAI's format, streamed tool calls back.

litellm speaks OpenAI's chat format for every provider (messages: ``openai_messages``): an
assistant message carries
``tool_calls`` (``{"id", "type": "function", "function": {"name", "arguments"}}``), a
tool result is ``{"role": "tool", "tool_call_id", "content"}``, and a stream delivers
each tool call in pieces (``delta.tool_calls[i]`` with an ``index``; the id and name
come first, the argument string in fragments). ``ToolCallDeltas`` puts them together.
"""

from __future__ import annotations

from typing import Any

from .types import ToolCall, ToolSpec


def tool_dict(tool: ToolSpec) -> dict[str, Any]:
    """``tool`` as an OpenAI function tool."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


class ToolCallDeltas:
    """Collects streamed tool-call pieces and reasoning deltas of one response."""

    def __init__(self) -> None:
        self._calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
        self._reasoning: list[str] = []
        self.reasoning_field: str | None = None
        """The field the reasoning came under (the first that had some)."""

    def add(self, delta: Any) -> None:
        """Take one chunk's ``delta``."""
        for reasoning_field in ("reasoning_content", "reasoning"):
            piece = _field(delta, reasoning_field)
            if isinstance(piece, str) and piece:
                self._reasoning.append(piece)
                self.reasoning_field = self.reasoning_field or reasoning_field
                break
        for position, piece in enumerate(_field(delta, "tool_calls") or ()):
            index = _field(piece, "index")
            slot = self._calls.setdefault(position if index is None else int(index), ["", "", ""])
            if _field(piece, "id"):
                slot[0] = _field(piece, "id")
            function = _field(piece, "function")
            if function is not None:
                if _field(function, "name"):
                    slot[1] = _field(function, "name")
                if _field(function, "arguments"):
                    slot[2] += _field(function, "arguments")

    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The complete calls, in index order (a call without a name is dropped)."""
        calls = []
        for index in sorted(self._calls):
            call_id, name, arguments = self._calls[index]
            if name:
                calls.append(ToolCall(call_id or f"call_{index}", name, arguments or "{}"))
        return tuple(calls)

    def reasoning(self) -> str | None:
        return "".join(self._reasoning) or None
