"""``Transcript``: one participant's tool-calling conversation with a ``ToolAgent``, pure state.

Its state is a ``conversation_state.Conversation`` (``conversation``): OpenAI's typed chat
messages (user turns, assistant messages with their tool calls and reasoning, tool
results), the last response's ``total_tokens`` (measured or estimated:
``tokens_estimated``), docs/tools.md's counters and the originals of reclaimed tool
results (for ``extract_compacted_tool_result``). The agent writes a turn through the
seed's methods (``add_user_message``, ``add_agent_message``, ``add_tool_result``). What a
transcript adds on top: the turn. Messages past ``committed`` are the current turn's,
pending: committed after the turn's final frame, rolled back when the turn is cancelled
or fails (a barge-in records nothing; a summary taken inside that turn stays, as
compactions of committed messages do). Also the summary of what tier 2 folded away, and
the bookkeeping of its mirror in the transcript store (``revision``, ``rewritten``,
``resync``, ``turn_ids``). It wraps the conversation rather than extending it, so the
conversation stays the seed's plain state that ``Conversation.dumps`` writes and a chat
front end renders. Every store is bounded: originals beyond ``originals_budget_chars``
are evicted oldest first, and counted. ``pop_from_last_user_message`` takes back the last
question (``/retry``, ``/revise``). ``turn_ids`` names the newest committed turns (their
exchanges in the shared context), so the agent that takes a question back takes its
exchange back there too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam as Message

ORIGINALS_BUDGET_CHARS = 1_000_000
"""Default bound on the characters of reclaimed originals a transcript keeps."""

MAX_TURN_IDS = 64
"""Turn ids a transcript keeps, its newest turns': questions taken back beyond them leave
their exchange in the shared context."""


class UnknownToolCall(KeyError):
    """``extract`` was given an id with no stored original."""


class Transcript:
    """One participant's transcript; see the module docstring."""

    def __init__(self, *, originals_budget_chars: int = ORIGINALS_BUDGET_CHARS) -> None:
        if originals_budget_chars < 0:
            raise ValueError("Transcript.originals_budget_chars: must be >= 0")
        self.originals_budget_chars = originals_budget_chars
        self.conversation = Conversation()
        """The messages, committed then pending; the token count, counters and originals."""
        self.committed = 0
        """How many of the conversation's messages are committed (the rest: this turn's)."""
        self.summary: str | None = None
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
        self.conversation.clear()  # the seed's: token count, counters and originals too
        self.committed, self.summary = 0, None
        self._originals_chars = 0
        self._new_originals.clear()
        self.rewritten = False
        self.revision = 0
        self.resync = False
        self.turn_ids.clear()
        self._new_turn_ids.clear()

    @property
    def messages(self) -> list[Message]:
        """The committed messages (a copy)."""
        return self.conversation.messages[: self.committed]

    @property
    def pending(self) -> list[Message]:
        """The current turn's messages (a copy)."""
        return self.conversation.messages[self.committed :]

    def all_messages(self) -> list[Message]:
        """Committed then pending messages: what a request renders (a copy)."""
        return list(self.conversation.messages)

    def replace(self, messages: list[Any]) -> None:
        """Make ``messages`` (OpenAI's chat messages) the committed ones, no turn pending."""
        self.conversation.messages = list(messages)
        self.committed = len(messages)

    def extend(self, messages: Sequence[Any]) -> None:
        """Commit ``messages`` after the committed ones (a mirror applying an append)."""
        del self.conversation.messages[self.committed :]
        self.conversation.messages.extend(messages)
        self.committed = len(self.conversation.messages)

    @property
    def total_tokens(self) -> int | None:
        """The last response's total tokens (``Conversation.total_tokens``)."""
        return self.conversation.total_tokens

    @total_tokens.setter
    def total_tokens(self, value: int | None) -> None:
        self.conversation.total_tokens = value

    @property
    def tokens_estimated(self) -> bool:
        """``total_tokens`` was counted by a tokenizer (no usage reported)."""
        return self.conversation.tokens_estimated

    @property
    def counters(self) -> CompactionCounter:
        """docs/tools.md's counters (``Conversation.compaction_counter``)."""
        return self.conversation.compaction_counter

    @counters.setter
    def counters(self, value: CompactionCounter) -> None:
        self.conversation.compaction_counter = value

    # ----------------------------------------------------------------- the turn

    def commit(self, turn_id: str | None = None) -> None:
        """The turn completed: its messages join the transcript (``turn_id``: its id)."""
        self.committed = len(self.conversation.messages)
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
        """The turn was cancelled or failed: forget its messages (what answered its
        question, then the question: ``pop_last_message_if_user``)."""
        del self.conversation.messages[self.committed + 1 :]
        if len(self.conversation.messages) > self.committed:
            self.conversation.pop_last_message_if_user()

    def note_usage(self, total_tokens: int | None, *, estimated: bool = False) -> None:
        """Remember the last response's total tokens; ``estimated`` when a tokenizer
        counted them because the provider reported no usage."""
        self.conversation.note_usage(total_tokens, estimated=estimated)

    def pop_from_last_user_message(self, inclusive: bool = False) -> list[Message]:
        """Drop the messages after the last user message (``/retry``), and with
        ``inclusive`` that message too (``/revise``); the dropped messages (none without a
        user message). A drop rewrites the transcript (the store gets all of it). Called
        between turns (nothing pending)."""
        dropped = self.conversation.pop_from_last_user_message(inclusive)
        self.committed = min(self.committed, len(self.conversation.messages))
        if dropped:
            self.rewritten = True
        return dropped

    @property
    def originals_count(self) -> int:
        return len(self.conversation.originals)

    # ----------------------------------------------------------------- tier 1

    def compact_toolcall(self, keep_max: int) -> ToolCallCompactResult:
        """Tier 1 over committed and pending messages; originals are kept for ``extract``."""
        done = compact_toolcall(self.conversation.messages, keep_max)
        committed = self.committed
        if any(old is not new for old, new in zip(self.messages, done.messages[:committed])):
            self.rewritten = True
        self.conversation.messages = list(done.messages)
        for call_id, original in done.originals.items():
            self._store(call_id, original)
        self.counters.tool_rounds += 1
        self.counters.toolcall_rounds_total += 1
        self.counters.toolcall_reclaimed += done.result.reclaimed_count
        return done.result

    def extract(self, toolcall_id: str) -> str:
        """The original of a reclaimed tool result; ``UnknownToolCall`` if none is stored."""
        try:
            return self.conversation.originals[toolcall_id]
        except KeyError:
            raise UnknownToolCall(toolcall_id) from None

    def originals(self) -> tuple[tuple[str, str], ...]:
        """Every stored original as (call id, text), oldest first."""
        return tuple(self.conversation.originals.items())

    def store_originals(self, originals: tuple[tuple[str, str], ...]) -> None:
        """Store originals reclaimed elsewhere (a mirror applying a write)."""
        for call_id, original in originals:
            self._store(call_id, original)

    def take_new_originals(self) -> tuple[tuple[str, str], ...]:
        """The originals stored since the last call (what a mirror has not seen yet)."""
        originals = self.conversation.originals
        new = tuple((call_id, originals[call_id]) for call_id in self._new_originals)
        self._new_originals.clear()
        return new

    def take_rewritten(self) -> bool:
        """Whether committed messages changed since the last call."""
        rewritten, self.rewritten = self.rewritten, False
        return rewritten

    def _store(self, call_id: str, original: str) -> None:
        originals = self.conversation.originals
        previous = originals.pop(call_id, None)
        if previous is not None:
            self._originals_chars -= len(previous)
        originals[call_id] = original
        self._new_originals[call_id] = None
        self._originals_chars += len(original)
        while self._originals_chars > self.originals_budget_chars and originals:
            dropped_id = next(iter(originals))  # the oldest
            dropped = originals.pop(dropped_id)
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
                call_id, content = message.get("tool_call_id"), message.get("content")
                if (
                    message["role"] == "tool"
                    and isinstance(call_id, str)
                    and call_id
                    and isinstance(content, str)
                    and content != placeholder(call_id)
                ):
                    self._store(call_id, content)
            self.conversation.messages = [*messages, *later]
            self.committed = self._committed_after(plan, self.committed) if plan else 0
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
            index = max(i for i, message in enumerate(plan.head) if message["role"] == "user")
            kept_user = int(index < committed)
        return kept_user + max(0, committed - head)
