"""``Conversation``: an agent's conversation as OpenAI's typed chat messages, pure state.

``messages`` holds the ``openai`` package's ``ChatCompletionMessageParam`` dictionaries
as they are, no wrapper: ``{"role": "system" | "user" | "assistant" | "tool", ...}``.
The system message, when there is one, is at index 0. An assistant message's tool calls
are its ``tool_calls`` (``{"id", "type": "function", "function": {"name", "arguments"}}``,
the argument strings verbatim); each tool result is a ``role="tool"`` message naming its
call in ``tool_call_id``. A model's reasoning is kept verbatim under ``reasoning_field``
(``reasoning_content`` or ``reasoning``, the field the model itself uses), so it goes
back to the model on the next turn.

Two length metrics: ``total_tokens`` is what the provider reported
(``usage.total_tokens``, None when unknown or after a compaction) and is the one trigger
of automatic compaction; ``estimated_message_length()`` counts the characters of every
``content`` / ``text`` / ``reasoning`` / ``reasoning_content`` string, recursing into
nested dictionaries and lists, for judging what a compaction reclaimed.

``dumps``/``loads`` (and ``dump``/``load`` to a file) serialise it as JSON; the token
count is stored under ``tokens_used``, the key earlier files use, and beside it
``tokens_estimated`` (absent from earlier files: False). ``to_history`` and
``render_history_as_html`` (``conversation_html``) are for a UI and ``/render``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from xrmq.actors.models.openai_messages import REASONING_FIELDS

from .conversation_html import (
    HistoryEntry,
    content_to_html,
    history_entry,
    render_history_as_html,
)
from .conversation_images import image_blocks

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

LENGTH_FIELDS = frozenset({"content", "text", "reasoning", "reasoning_content"})
"""The fields ``estimated_message_length`` counts."""

ROLES = ("system", "user", "assistant", "tool")


@dataclass(slots=True)
class CompactionCounter:
    """Compaction rounds since the conversation began (or was cleared): the seed's two, then
    docs/tools.md's totals per tier and outcome."""

    tool_rounds: int = 0
    """Consecutive tool-result reclaiming rounds since the last summary (drives escalation)."""
    summary_rounds: int = 0
    """Summaries applied."""
    toolcall_rounds_total: int = 0
    """Tier-1 rounds, in all (``tool_rounds`` restarts after a summary; this does not)."""
    toolcall_reclaimed: int = 0
    """Tool results replaced by placeholders, in all."""
    nothing_to_condense: int = 0
    summarize_failed: int = 0
    originals_evicted: int = 0
    """Reclaimed originals dropped to stay within a budget."""


class Conversation:
    """One conversation; see the module docstring."""

    def __init__(
        self,
        messages: Iterable[Mapping[str, Any]] = (),
        *,
        reasoning_field: str = "reasoning_content",
        total_tokens: int | None = None,
        tokens_estimated: bool = False,
    ) -> None:
        if reasoning_field not in REASONING_FIELDS:
            raise ValueError(
                f"Conversation.reasoning_field: must be one of {', '.join(REASONING_FIELDS)}"
            )
        self.reasoning_field = reasoning_field
        self.messages: list[ChatCompletionMessageParam] = [
            checked_message(message, f"Conversation.messages[{index}]")
            for index, message in enumerate(messages)
        ]
        self.total_tokens = total_tokens
        self.tokens_estimated = tokens_estimated
        """``total_tokens`` was counted by a tokenizer: the provider reported no usage."""
        self.compaction_counter = CompactionCounter()
        self.originals: dict[str, str] = {}
        """Originals of compacted tool results by call id (what a placeholder replaced),
        oldest first."""

    # ------------------------------------------------------------ writing

    def set_system_message_content(self, content: str) -> None:
        """Replace the system message at index 0, or insert one there."""
        if self.messages and self.messages[0]["role"] == "system":
            self.messages[0] = {**self.messages[0], "content": content}
        else:
            self.messages.insert(0, {"role": "system", "content": content})

    def add_user_message(self, content: str, images: Any = None) -> None:
        """Add a user message; with ``images`` (one or a list: paths, URLs, PIL images)
        its content is a list of a text block then ``image_url`` blocks (data URLs)."""
        if images is None:
            self.messages.append({"role": "user", "content": content})
            return
        blocks = image_blocks(content, images, "Conversation.add_user_message.images")
        self.messages.append(
            cast("ChatCompletionMessageParam", {"role": "user", "content": blocks})
        )

    def append_user_message(self, extra: str) -> None:
        """Append ``extra`` to the last user message (as a new paragraph, or a new text block
        when its content is blocks); ``ValueError`` when there is no user message."""
        index = _last_index(self.messages, "user")
        if index is None:
            raise ValueError("Conversation.append_user_message: there is no user message")
        message: dict[str, Any] = dict(self.messages[index])
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = f"{content}\n\n{extra}" if content else extra
        else:
            message["content"] = [*(content or []), {"type": "text", "text": extra}]
        self.messages[index] = cast("ChatCompletionMessageParam", message)

    def add_agent_message(self, message: Mapping[str, Any] | Any) -> None:
        """Add an assistant message (a dictionary, or the ``openai`` package's response
        message); an empty ``tool_calls`` list is dropped, and reasoning under either field
        is kept verbatim under ``reasoning_field``."""
        if not isinstance(message, Mapping):
            dump = getattr(message, "model_dump", None)
            if not callable(dump):
                raise ValueError(
                    "Conversation.add_agent_message.message: must be a dictionary or an "
                    "openai ChatCompletionMessage"
                )
            message = dump(exclude_none=True)
        out = {key: value for key, value in message.items() if key not in REASONING_FIELDS}
        out["role"] = "assistant"
        if "tool_calls" in out and not out["tool_calls"]:
            del out["tool_calls"]
        for field in REASONING_FIELDS:
            if message.get(field):
                out[self.reasoning_field] = message[field]
                break
        self.messages.append(checked_message(out, "Conversation.add_agent_message.message"))

    def add_tool_result(self, tool_call_id: str, result: Any) -> None:
        """Add ``result`` as the ``role="tool"`` message answering ``tool_call_id``: its
        ``value_str()`` when it has one, its ``content`` (a ``ToolCallReply``), or the text."""
        if not isinstance(tool_call_id, str) or not tool_call_id:
            raise ValueError("Conversation.add_tool_result.tool_call_id: must be non-empty")
        value_str = getattr(result, "value_str", None)
        if callable(value_str):
            text = value_str()
        elif isinstance(getattr(result, "content", None), str):
            text = result.content
        else:
            text = result if isinstance(result, str) else str(result)
        self.messages.append({"role": "tool", "tool_call_id": tool_call_id, "content": text})

    # ------------------------------------------------------------ rolling back

    def pop_last_message_if_user(self) -> ChatCompletionMessageParam | None:
        """Remove the last message if it is a user message (a cancelled turn); it, or None."""
        if self.messages and self.messages[-1]["role"] == "user":
            return self.messages.pop()
        return None

    def pop_from_last_user_message(
        self, inclusive: bool = False
    ) -> list[ChatCompletionMessageParam]:
        """Remove what follows the last user message (``/retry``), and with ``inclusive``
        that message too (``/revise``); the removed messages (none without a user message)."""
        index = _last_index(self.messages, "user")
        if index is None:
            return []
        start = index if inclusive else index + 1
        removed = self.messages[start:]
        del self.messages[start:]
        return removed

    def clear(self) -> None:
        """Forget every message but the system message; reset the token count, the
        compaction counters and the originals of compacted tool results."""
        self.messages = [m for m in self.messages[:1] if m["role"] == "system"]
        self.total_tokens = None
        self.tokens_estimated = False
        self.compaction_counter = CompactionCounter()
        self.originals = {}

    # ------------------------------------------------------------ lengths

    def estimated_message_length(self) -> int:
        """Characters of every content/text/reasoning/reasoning_content string, recursing
        into nested dictionaries and lists."""
        return sum(message_length(message) for message in self.messages)

    def note_usage(self, total_tokens: int | None, *, estimated: bool = False) -> None:
        """Remember the provider's ``usage.total_tokens`` for the last response;
        ``estimated`` when a tokenizer counted them because the provider reported none."""
        self.total_tokens = total_tokens
        self.tokens_estimated = estimated

    # ------------------------------------------------------------ rendering

    def to_history(self) -> list[HistoryEntry]:
        """The messages as a UI shows them (``conversation_html.HistoryEntry``)."""
        return [history_entry(message) for message in self.messages]

    @staticmethod
    def content_to_html(message: Mapping[str, Any]) -> str:
        """One message's body as HTML (what ``render_history_as_html`` shows of it)."""
        return content_to_html(history_entry(message))

    def render_history_as_html(self, title: str = "Conversation") -> str:
        """The conversation as a standalone HTML page: text escaped, tool calls and their
        results folded in ``<details>``."""
        return render_history_as_html(self.to_history(), title)

    # ------------------------------------------------------------ serialisation

    def dumps(self) -> str:
        """The conversation as JSON (the token count under ``tokens_used``)."""
        return json.dumps(
            {
                "messages": self.messages,
                "tokens_used": self.total_tokens,
                "tokens_estimated": self.tokens_estimated,
                "reasoning_field": self.reasoning_field,
                "compaction_counter": dataclasses.asdict(self.compaction_counter),
                "originals": self.originals,
            },
            ensure_ascii=False,
        )

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Write ``dumps()`` to ``path``."""
        with open(path, "w", encoding="utf-8") as file:
            file.write(self.dumps())

    @classmethod
    def loads(cls, text: str) -> Conversation:
        """A conversation from ``dumps()``'s JSON; ``ValueError`` naming what is wrong."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"Conversation.loads: not JSON: {error}") from None
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            raise ValueError("Conversation.loads.messages: must be a list of messages")
        tokens = data.get("tokens_used")
        if tokens is not None and not isinstance(tokens, int):
            raise ValueError("Conversation.loads.tokens_used: must be an integer or null")
        conversation = cls(
            data["messages"],
            reasoning_field=data.get("reasoning_field", "reasoning_content"),
            total_tokens=tokens,
            tokens_estimated=bool(data.get("tokens_estimated", False)),
        )
        counter = data.get("compaction_counter") or {}
        try:
            conversation.compaction_counter = CompactionCounter(**counter)
        except TypeError as error:
            raise ValueError(f"Conversation.loads.compaction_counter: {error}") from None
        conversation.originals = {str(k): str(v) for k, v in (data.get("originals") or {}).items()}
        return conversation

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Conversation:
        """A conversation from a file ``dump`` wrote."""
        with open(path, encoding="utf-8") as file:
            return cls.loads(file.read())


def checked_message(message: Mapping[str, Any], field: str) -> ChatCompletionMessageParam:
    if not isinstance(message, Mapping) or message.get("role") not in ROLES:
        raise ValueError(f"{field}: must be a message with a role of {', '.join(ROLES)}")
    if message["role"] == "tool" and not message.get("tool_call_id"):
        raise ValueError(f"{field}.tool_call_id: a tool message must name its call")
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not (
            isinstance(call.get("id") if isinstance(call, Mapping) else None, str)
            and isinstance(function, Mapping)
            and isinstance(function.get("name"), str)
            and isinstance(function.get("arguments"), str)
        ):
            raise ValueError(
                f"{field}.tool_calls[{index}]: must be {{'id', 'type': 'function', "
                "'function': {'name', 'arguments'}} with strings"
            )
    return cast("ChatCompletionMessageParam", dict(message))


def _last_index(messages: list[ChatCompletionMessageParam], role: str) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] == role:
            return index
    return None


def message_length(value: Any) -> int:
    """Characters of every content/text/reasoning/reasoning_content string of a message (or
    a sequence of them), recursing into nested dictionaries and lists."""
    if isinstance(value, Mapping):
        total = 0
        for key, item in value.items():
            if isinstance(item, str):
                total += len(item) if key in LENGTH_FIELDS else 0
            else:
                total += message_length(item)
        return total
    if isinstance(value, list | tuple):
        return sum(message_length(item) for item in value)
    return 0
