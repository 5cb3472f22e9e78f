"""``Transcript``: one participant's tool-calling conversation with a ``ToolAgent``, pure state.

It holds the committed messages (user turns, assistant messages with their tool calls,
tool results), the current turn's pending messages (committed after the turn's final
frame, dropped when the turn is cancelled or fails: a barge-in records nothing; a
summary taken inside that turn stays, as compactions of committed messages do), the
summary of what tier 2 folded away, the originals of reclaimed tool results (for
``extract_compacted_tool_result``), the last response's ``total_tokens`` (measured or
estimated) and
docs/tools.md's counters. Every store is bounded: originals beyond ``originals_budget_chars``
are evicted oldest first, and counted. ``conversation()`` shows it as OpenAI's typed chat
messages (``conversation_state.Conversation``), the form its journal rows hold;
``pop_from_last_user_message`` takes back the last question (``/retry``, ``/revise``).
``turn_ids`` names the newest committed turns (their exchanges in the shared context),
so the agent that takes a question back takes its exchange back there too.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from xrmq.actors.models import ChatMessage

from .conversation_state import CompactionCounter, Conversation
from .tiers import (
    SummaryCompactResult,
    SummaryPlan,
    SummaryStatus,
    ToolCallCompactResult,
    apply_summary,
    compact_toolcall,
    placeholder,
    plan_summary,
)

ORIGINALS_BUDGET_CHARS = 1_000_000
"""Default bound on the characters of reclaimed originals a transcript keeps."""

MAX_TURN_IDS = 64
"""Turn ids a transcript keeps, its newest turns': questions taken back beyond them leave
their exchange in the shared context."""


class UnknownToolCall(KeyError):
    """``extract`` was given an id with no stored original."""


@dataclass(slots=True)
class CompactionCounters:
    """docs/tools.md's counters plus totals per tier and outcome."""

    tool_rounds: int = 0
    """Consecutive tier-1 rounds since the last summary (drives escalation)."""
    summary_rounds: int = 0
    """Summaries applied."""
    toolcall_rounds_total: int = 0
    """Tier-1 rounds, in all (``tool_rounds`` restarts after a summary; this does not)."""
    toolcall_reclaimed: int = 0
    """Tool results replaced by placeholders, in all."""
    nothing_to_condense: int = 0
    summarize_failed: int = 0
    originals_evicted: int = 0
    """Reclaimed originals dropped to stay within the budget."""


class Transcript:
    """One participant's transcript; see the module docstring."""

    def __init__(self, *, originals_budget_chars: int = ORIGINALS_BUDGET_CHARS) -> None:
        if originals_budget_chars < 0:
            raise ValueError("Transcript.originals_budget_chars: must be >= 0")
        self.originals_budget_chars = originals_budget_chars
        self.messages: list[ChatMessage] = []
        self.pending: list[ChatMessage] = []
        self.summary: str | None = None
        self.total_tokens: int | None = None
        self.tokens_estimated = False
        self.counters = CompactionCounters()
        self._originals: OrderedDict[str, str] = OrderedDict()
        self._originals_chars = 0
        self._new_originals: dict[str, None] = {}
        self.rewritten = False
        """Set when a compaction changed committed messages (cleared by ``take_rewritten``)."""
        self.revision = 0
        """Writes mirrored to the transcript store so far (``store.TranscriptWrite``)."""
        self.resync = False
        """The store may have missed a write: the next mirror sends the whole transcript."""
        self.turn_ids: list[str] = []
        """The ids of the newest committed turns, oldest first, the newest turn last: one
        per turn committed with an id, paired with the user messages from the end."""
        self._new_turn_ids: list[str] = []

    def clear(self) -> None:
        """Forget everything: messages, summary, token count, counters, originals."""
        self.messages, self.pending, self.summary, self.total_tokens = [], [], None, None
        self.tokens_estimated = False
        self.counters = CompactionCounters()
        self._originals.clear()
        self._originals_chars = 0
        self._new_originals.clear()
        self.rewritten = False
        self.revision = 0
        self.resync = False
        self.turn_ids.clear()
        self._new_turn_ids.clear()

    # ----------------------------------------------------------------- the turn

    def append(self, *messages: ChatMessage) -> None:
        """Add messages to the current turn (pending until ``commit``)."""
        self.pending.extend(messages)

    def commit(self, turn_id: str | None = None) -> None:
        """The turn completed: its messages join the transcript (``turn_id``: its id)."""
        self.messages.extend(self.pending)
        self.pending.clear()
        if turn_id is not None:
            self.note_turn_ids((turn_id,))
            self._new_turn_ids.append(turn_id)
            del self._new_turn_ids[:-MAX_TURN_IDS]

    def note_turn_ids(self, turn_ids: tuple[str, ...]) -> None:
        """Add the ids of newer turns (the oldest beyond ``MAX_TURN_IDS`` are forgotten)."""
        self.turn_ids.extend(turn_ids)
        del self.turn_ids[:-MAX_TURN_IDS]

    def take_new_turn_ids(self) -> tuple[str, ...]:
        """The turn ids committed since the last call (what a mirror has not seen yet)."""
        new = tuple(self._new_turn_ids)
        self._new_turn_ids.clear()
        return new

    def rollback(self) -> None:
        """The turn was cancelled or failed: forget its messages."""
        self.pending.clear()

    def all_messages(self) -> list[ChatMessage]:
        """Committed then pending messages: what a request renders."""
        return [*self.messages, *self.pending]

    def note_usage(self, total_tokens: int | None, *, estimated: bool = False) -> None:
        """Remember the last response's total tokens; ``estimated`` when a tokenizer
        counted them because the provider reported no usage."""
        self.total_tokens = total_tokens
        self.tokens_estimated = estimated

    def conversation(self) -> Conversation:
        """The committed then pending messages as a ``Conversation`` (OpenAI's typed chat
        messages), with the token count, the compaction round counters and the originals."""
        conversation = Conversation.of_chat_messages(self.all_messages())
        conversation.total_tokens = self.total_tokens
        conversation.compaction_counter = CompactionCounter(
            self.counters.tool_rounds, self.counters.summary_rounds
        )
        conversation.originals = dict(self._originals)
        return conversation

    def pop_from_last_user_message(self, inclusive: bool = False) -> list[ChatMessage]:
        """Drop the committed messages after the last user message (``/retry``), and with
        ``inclusive`` that message too (``/revise``); the dropped messages (none without a
        user message). A drop rewrites the transcript (the store gets all of it)."""
        last = max((i for i, m in enumerate(self.messages) if m.role == "user"), default=None)
        if last is None:
            return []
        start = last if inclusive else last + 1
        dropped = self.messages[start:]
        if dropped:
            self.messages = self.messages[:start]
            self.rewritten = True
        return dropped

    @property
    def originals_count(self) -> int:
        return len(self._originals)

    # ----------------------------------------------------------------- tier 1

    def compact_toolcall(self, keep_max: int) -> ToolCallCompactResult:
        """Tier 1 over committed and pending messages; originals are kept for ``extract``."""
        committed = len(self.messages)
        done = compact_toolcall(self.all_messages(), keep_max)
        if any(old is not new for old, new in zip(self.messages, done.messages[:committed])):
            self.rewritten = True
        self.messages = list(done.messages[:committed])
        self.pending = list(done.messages[committed:])
        for call_id, original in done.originals.items():
            self._store(call_id, original)
        self.counters.tool_rounds += 1
        self.counters.toolcall_rounds_total += 1
        self.counters.toolcall_reclaimed += done.result.reclaimed_count
        return done.result

    def extract(self, toolcall_id: str) -> str:
        """The original of a reclaimed tool result; ``UnknownToolCall`` if none is stored."""
        try:
            return self._originals[toolcall_id]
        except KeyError:
            raise UnknownToolCall(toolcall_id) from None

    def originals(self) -> tuple[tuple[str, str], ...]:
        """Every stored original as (call id, text), oldest first."""
        return tuple(self._originals.items())

    def store_originals(self, originals: tuple[tuple[str, str], ...]) -> None:
        """Store originals reclaimed elsewhere (a mirror applying a write)."""
        for call_id, original in originals:
            self._store(call_id, original)

    def take_new_originals(self) -> tuple[tuple[str, str], ...]:
        """The originals stored since the last call (what a mirror has not seen yet)."""
        new = tuple((call_id, self._originals[call_id]) for call_id in self._new_originals)
        self._new_originals.clear()
        return new

    def take_rewritten(self) -> bool:
        """Whether committed messages changed since the last call."""
        rewritten, self.rewritten = self.rewritten, False
        return rewritten

    def _store(self, call_id: str, original: str) -> None:
        previous = self._originals.pop(call_id, None)
        if previous is not None:
            self._originals_chars -= len(previous)
        self._originals[call_id] = original
        self._new_originals[call_id] = None
        self._originals_chars += len(original)
        while self._originals_chars > self.originals_budget_chars and self._originals:
            dropped_id, dropped = self._originals.popitem(last=False)
            self._new_originals.pop(dropped_id, None)
            self._originals_chars -= len(dropped)
            self.counters.originals_evicted += 1

    # ----------------------------------------------------------------- tier 2

    def plan_summary(self, keep_recent: int) -> SummaryPlan | None:
        """Tier 2's cut over committed and pending messages: a long turn is summarized
        inside the turn (its user message is kept at the tail's start)."""
        return plan_summary(self.all_messages(), keep_recent)

    def apply_summary(self, plan: SummaryPlan | None, summary: str | None) -> SummaryCompactResult:
        """Apply a summary of ``plan.head`` (which must still be the transcript's prefix).

        On success the summary replaces the old one (the summarizer was given it), the
        tool results it folded away join the originals (``extract`` still finds them),
        ``total_tokens`` is cleared and the tier-1 round counter restarts. Otherwise
        nothing changes; the outcome is counted either way.
        """
        everything = self.all_messages()
        if plan is not None and tuple(everything[: len(plan.head)]) != plan.head:
            summary = None  # the transcript changed under the summarizer: apply nothing
        later = everything[len(plan.head) + plan.cut_tail_length :] if plan is not None else []
        messages, result = apply_summary(everything, plan, summary)
        if result.status is SummaryStatus.NOTHING_TO_CONDENSE:
            self.counters.nothing_to_condense += 1
        elif result.status is SummaryStatus.SUMMARIZE_FAILED:
            self.counters.summarize_failed += 1
        else:
            for message in plan.head if plan is not None else ():
                call_id = message.tool_call_id
                if message.role == "tool" and call_id and message.content != placeholder(call_id):
                    self._store(call_id, message.content)
            kept = [*messages, *later]
            committed = self._committed_after(plan, len(self.messages)) if plan else 0
            self.messages, self.pending = kept[:committed], kept[committed:]
            self.summary = summary
            self.rewritten = True
            self.total_tokens = None
            self.counters.tool_rounds = 0
            self.counters.summary_rounds += 1
        return result

    @staticmethod
    def _committed_after(plan: SummaryPlan, committed: int) -> int:
        """How many messages of the summarized transcript are committed: the tail's
        messages that were (a re-kept user message counts with the side it came from)."""
        head = len(plan.head)
        kept_user = 0
        if plan.kept_user:
            index = max(i for i, message in enumerate(plan.head) if message.role == "user")
            kept_user = int(index < committed)
        return kept_user + max(0, committed - head)
