"""docs/tools.md's tiered compaction of a tool-calling transcript: pure functions, no I/O.

Tier 1 (``compact_toolcall``) replaces tool results older than the most recent
``keep_max`` by a placeholder naming the call, only where the placeholder is shorter;
the originals are returned so the transcript keeps them for
``extract_compacted_tool_result``. Tier 2 (``plan_summary`` then ``apply_summary``)
replaces the prefix before a cut by a summary, keeping ``keep_recent`` trailing
messages: the tail never starts with an orphaned tool result and keeps the last user
message. The messages are OpenAI's typed chat messages (a ``Conversation`` 's), never
changed in place: a compacted message is a new dictionary. ``estimated_message_length``
(the characters of content, text and reasoning) measures what a tier reclaimed; the
policy that chains the tiers is ``policy.AutoCompactor``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .conversation_state import message_length

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam as Message

TOOLCALL_KEEP_MAX = 12
"""Tier 1 keeps this many most recent tool results verbatim (docs/tools.md)."""
SUMMARY_KEEP_MAX = 16
"""Tier 2 keeps this many trailing messages (docs/tools.md)."""

PLACEHOLDER = (
    "[Compacted, ID: {toolcall_id}. If this content is still needed, call "
    "extract_compacted_tool_result with this ID or re-run the tool.]"
)
"""The text that replaces a reclaimed tool result, word for word as docs/tools.md gives it."""


def placeholder(toolcall_id: str) -> str:
    """The placeholder for the tool result of call ``toolcall_id``."""
    return PLACEHOLDER.format(toolcall_id=toolcall_id)


def estimated_message_length(messages: Mapping[str, Any] | Sequence[Message]) -> int:
    """Characters of the content, text and reasoning fields of one message or a sequence.

    docs/tools.md's length proxy: it decides between reclaiming again and escalating, and
    gives each tier's reclaimed fraction. Tool-call argument strings and image URLs do not
    count.
    """
    return message_length(messages)


def _fraction(before: int, after: int) -> float:
    return 0.0 if before <= 0 else max(0.0, (before - after) / before)


@dataclass(frozen=True, slots=True)
class ToolCallCompactResult:
    """What one tier-1 round reclaimed."""

    reclaimed_count: int
    """Tool results replaced by placeholders in this round."""
    reclaimed_fraction: float
    """Share of the transcript's ``estimated_message_length`` this round removed."""


@dataclass(frozen=True, slots=True)
class ToolCallCompaction:
    """The transcript after tier 1, the originals it reclaimed (by call id, oldest first),
    and the result."""

    messages: tuple[Message, ...]
    originals: dict[str, str]
    result: ToolCallCompactResult


def compact_toolcall(
    messages: Sequence[Message], keep_max: int = TOOLCALL_KEEP_MAX
) -> ToolCallCompaction:
    """Tier 1: reclaim tool results older than the most recent ``keep_max``.

    Walks newest to oldest; the newest ``keep_max`` tool messages stay. Each older one
    is replaced in place by ``placeholder(tool_call_id)`` only if that is shorter than
    its content (a result already reclaimed, or a short one, is left alone).
    """
    if keep_max < 0:
        raise ValueError("compact_toolcall.keep_max: must be >= 0")
    out = list(messages)
    originals: dict[str, str] = {}
    seen = 0
    for index in range(len(out) - 1, -1, -1):
        message = out[index]
        if message["role"] != "tool":
            continue
        seen += 1
        content = message.get("content")
        if seen <= keep_max or not isinstance(content, str):
            continue
        call_id = message.get("tool_call_id") or ""
        replacement = placeholder(call_id)
        if len(replacement) < len(content):
            originals[call_id] = content
            out[index] = cast("Message", {**message, "content": replacement})
    before, after = estimated_message_length(messages), estimated_message_length(out)
    originals = dict(reversed(originals.items()))  # oldest first, as the transcript orders them
    return ToolCallCompaction(
        tuple(out), originals, ToolCallCompactResult(len(originals), _fraction(before, after))
    )


class SummaryStatus(enum.Enum):
    """How a tier-2 attempt ended (docs/tools.md)."""

    COMPACTED = "compacted"
    NOTHING_TO_CONDENSE = "nothing_to_condense"
    """Nothing precedes the cut: the transcript is left untouched."""
    SUMMARIZE_FAILED = "summarize_failed"
    """The summary could not be had: the transcript is left untouched."""


@dataclass(frozen=True, slots=True)
class SummaryCompactResult:
    """What one tier-2 attempt did."""

    status: SummaryStatus
    reclaimed_fraction: float = 0.0
    summarized_count: int = 0
    """Messages folded into the summary."""


@dataclass(frozen=True, slots=True)
class SummaryPlan:
    """Where tier 2 cuts: ``head`` goes to the summarizer, ``tail`` stays verbatim."""

    head: tuple[Message, ...]
    tail: tuple[Message, ...]
    kept_user: bool = False
    """The last user message fell in the head and is also kept at the tail's start."""

    @property
    def cut_tail_length(self) -> int:
        """Messages of the tail that followed the cut (the re-kept user message excluded)."""
        return len(self.tail) - int(self.kept_user)


def summary_cut(messages: Sequence[Message], keep_recent: int) -> int:
    """The index where the kept tail starts.

    If the messages from the last user message on number at most ``keep_recent``, the
    cut is at that user message. Otherwise it is ``len - keep_recent``, advanced past
    leading ``tool`` messages so the tail never starts with a result whose call was cut.
    """
    if keep_recent < 0:
        raise ValueError("summary_cut.keep_recent: must be >= 0")
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last_user is not None and len(messages) - last_user <= keep_recent:
        return last_user
    cut = max(0, len(messages) - keep_recent)
    while cut < len(messages) and messages[cut]["role"] == "tool":
        cut += 1
    return cut


def plan_summary(
    messages: Sequence[Message], keep_recent: int = SUMMARY_KEEP_MAX
) -> SummaryPlan | None:
    """Tier 2's cut, or ``None`` when nothing precedes it (``NOTHING_TO_CONDENSE``).

    When the last user message falls before the cut it is also kept, at the head of
    the tail (providers reject a request without a user message, and the task stays
    verbatim); it is then summarized as well.
    """
    cut = summary_cut(messages, keep_recent)
    head, tail = tuple(messages[:cut]), tuple(messages[cut:])
    if not head:
        return None
    if not any(message["role"] == "user" for message in tail):
        last_user = next((m for m in reversed(head) if m["role"] == "user"), None)
        if last_user is not None:
            return SummaryPlan(head, (last_user, *tail), kept_user=True)
    return SummaryPlan(head, tail)


def apply_summary(
    messages: Sequence[Message], plan: SummaryPlan | None, summary: str | None
) -> tuple[tuple[Message, ...], SummaryCompactResult]:
    """The transcript after tier 2 and the result; unchanged unless a summary came.

    ``summary`` is what the summarizer returned for ``plan.head`` (``None`` or blank:
    it failed). The caller keeps the summary text itself (rendered before the tail).
    """
    if plan is None:
        return tuple(messages), SummaryCompactResult(SummaryStatus.NOTHING_TO_CONDENSE)
    if summary is None or not summary.strip():
        return tuple(messages), SummaryCompactResult(SummaryStatus.SUMMARIZE_FAILED)
    before = estimated_message_length(messages) or 1
    after = estimated_message_length(plan.tail) + len(summary)
    result = SummaryCompactResult(SummaryStatus.COMPACTED, _fraction(before, after), len(plan.head))
    return plan.tail, result
