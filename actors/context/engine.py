"""The context engine: the operations of one section of one participant.

A section is the dialogue or one configured topic (docs/context.md, "Compaction").
``Section`` binds one section's configuration (``state.SectionSpec``,
``state.CompactionSettings``) and holds the operations, which mutate the
``state.SectionState`` they are given explicitly and return what the caller must act on.
Nothing here does I/O, reads a clock or calls a model: times are passed in, and
compaction is a ``CompactionRequest`` out and a ``CompactionResult`` in.

The caller's loop, for every participant and section:

1. Change the state: ``record_exchange`` / ``reconcile_history`` (dialogue),
   ``append_update`` (incremental topic), ``replace_state`` (summary topic), or
   ``apply_result`` (a compaction result arrived).
2. Call ``next_compaction``; send any request it returns to a compaction worker. At most
   one job per section is in flight; its request stays in ``state.pending`` until a
   result for it is applied, so it can be re-sent after a timeout.
3. ``render`` when ``state.revision`` changed; log the warning it may return.

Compaction runs over an immutable snapshot (docs/context.md, "Snapshot compaction"): a job
names the ids of the entries it summarizes, and its result removes exactly those, so entries
recorded while it ran survive. A result whose job is not the state's pending job (the state was
cleared and recreated, the job was already answered or abandoned) is discarded.

Summary guards (``CompactionSettings.guarded``, ``guard.SummaryGuard``): every model
summary, and every condensed one, is checked against what it replaces before it is
accepted, a failed request is never resent unchanged, and the extractive summariser
compacts what the model keeps failing on. ``next_compaction`` may then compact by the
fallback itself (the model's backoff), which changes the state like an applied result.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import msgspec

from xrmq.schemas import ContextBlock

from .clip import clip_middle, utf8_size
from .compaction import (
    CompactionKind,
    CompactionRequest,
    CompactionResult,
    JobRef,
    compact_message,
    condense_message,
    system_prompt,
)
from .guard import SummaryGuard, request_digest
from .render import (
    check_timestamp,
    exchange_text,
    fit_newest,
    state_text,
    summary_label,
    update_text,
)
from .state import (
    INPUT_BUDGET_MARGIN_BYTES,
    ApplyStatus,
    CompactionSettings,
    CondenseDue,
    Entry,
    OverBudget,
    PendingJob,
    RenderedSection,
    SectionKind,
    SectionSpec,
    SectionState,
    exchange_identity,
    history_tail,
    min_input_budget,
)


def _order(entry: Entry) -> tuple[int, int]:
    return (entry.timestamp_us, entry.entry_id)


class Section(msgspec.Struct, frozen=True):
    """The operations of one configured section, applied to any participant's state."""

    spec: SectionSpec
    settings: CompactionSettings

    def __post_init__(self) -> None:
        need = min_input_budget(self.spec.budget_bytes)
        if self.settings.input_budget_bytes < need:
            raise ValueError(
                "compaction_input_budget_bytes: must be at least half the section budget plus "
                f"{INPUT_BUDGET_MARGIN_BYTES} bytes (>= {need} for section {self.spec.name!r})"
            )

    def new_state(self, generation: str) -> SectionState:
        """An empty state; ``generation`` must be new for this section and participant."""
        return SectionState(generation=generation)

    # --- writing -----------------------------------------------------------------

    def _require_kind(self, kind: SectionKind, operation: str) -> None:
        if self.spec.kind != kind:
            raise ValueError(
                f"{operation}: section {self.spec.name!r} is a {self.spec.kind} section, not {kind}"
            )

    def _add_entry(
        self, state: SectionState, text: str, timestamp_us: int, identity: bytes = b""
    ) -> None:
        entry = Entry(state.next_entry_id, timestamp_us, text, utf8_size(text), identity)
        state.next_entry_id += 1
        bisect.insort(state.entries, entry, key=_order)
        state.awaiting_entry = False
        state.revision += 1
        self._hold_to_limit(state)

    def _hold_to_limit(self, state: SectionState) -> None:
        """Drop the oldest entries (never the newest, nor one a job in flight summarizes)
        while the uncompacted entries before the newest exceed ``stored_limit_bytes``; count
        them. The newest is left out of the sum, so one large entry evicts nothing."""
        if not state.entries:
            return
        excess = (
            self.uncompacted_bytes(state) - state.entries[-1].size - self.spec.stored_limit_bytes
        )
        if excess <= 0:
            return
        held = set(state.pending.entry_ids) if state.pending is not None else set()
        if state.condense_due is not None:
            held.update(state.condense_due.entry_ids)
        dropped: set[int] = set()
        for entry in state.entries[:-1]:
            if excess <= 0:
                break
            if entry.entry_id in held:
                continue
            dropped.add(entry.entry_id)
            excess -= entry.size
        if dropped:
            state.entries = [entry for entry in state.entries if entry.entry_id not in dropped]
            state.backlog = [entry_id for entry_id in state.backlog if entry_id not in dropped]
            state.dropped_entries += len(dropped)

    def record_exchange(
        self,
        state: SectionState,
        request: str,
        answer: str,
        *,
        timestamp_us: int,
        exchange_id: object | None,
    ) -> bool:
        """Add one completed exchange; False (nothing changes) if its identity is known."""
        self._require_kind("dialogue", "record_exchange")
        check_timestamp(timestamp_us)
        identity = exchange_identity(request, answer, timestamp_us, exchange_id)
        return self.add_exchange(state, identity, request, answer, timestamp_us=timestamp_us)

    def add_exchange(
        self, state: SectionState, identity: bytes, request: str, answer: str, *, timestamp_us: int
    ) -> bool:
        """Add an exchange whose identity the caller computed (``exchange_identity``).

        A writer in another process sends the identity rather than the exchange id,
        which may be any Python object. False (nothing changes) if the identity is known.
        """
        self._require_kind("dialogue", "add_exchange")
        check_timestamp(timestamp_us)
        if identity in state.exchange_identities:
            return False
        state.exchange_identities.add(identity)
        self._add_entry(state, exchange_text(request, answer, timestamp_us), timestamp_us, identity)
        return True

    def retract_exchange(self, state: SectionState, identity: bytes) -> bool:
        """Take back the uncompacted exchange with ``identity`` (a retried or revised
        question): its entry leaves the section; False (nothing changes) when no entry
        holds it (an unknown identity, one already taken back, or one a summary covers).

        The identity stays known, so the exchange re-sent (a write replayed after a
        restart, a front end's history window) is never added again. The newest exchange
        (what ``/retry`` takes back) is never in a compaction job; an older one a job in
        flight already took may still reach that job's summary.
        """
        self._require_kind("dialogue", "retract_exchange")
        kept = [entry for entry in state.entries if entry.identity != identity]
        if not identity or len(kept) == len(state.entries):
            return False
        gone = {entry.entry_id for entry in state.entries if entry.identity == identity}
        state.entries = kept
        state.backlog = [entry_id for entry_id in state.backlog if entry_id not in gone]
        state.revision += 1
        return True

    def reconcile_history(
        self,
        state: SectionState,
        exchanges: Sequence[tuple[str, str, int | None]],
        *,
        exchange_ids: Sequence[object | None],
        now_us: int,
    ) -> int:
        """Merge a front-end window of exchanges (oldest first); return how many were added.

        Only the contiguous tail after the window's last known exchange is added, and
        never an exchange whose identity is known, so a window that still holds
        compacted exchanges replays nothing. An unknown exchange before a known one is
        not added. An exchange without a timestamp is recorded at ``now_us``.
        """
        self._require_kind("dialogue", "reconcile_history")
        tail = history_tail(
            state.exchange_identities, exchanges, exchange_ids=exchange_ids, now_us=now_us
        )
        for identity, request, answer, when in tail:
            state.exchange_identities.add(identity)
            self._add_entry(state, exchange_text(request, answer, when), when, identity)
        return len(tail)

    def append_update(self, state: SectionState, text: str, *, timestamp_us: int) -> None:
        """Append one incremental topic update as a verbatim entry."""
        self._require_kind("incremental", "append_update")
        check_timestamp(timestamp_us)
        self._add_entry(state, update_text(self.spec.name, text, timestamp_us), timestamp_us)

    def replace_state(self, state: SectionState, text: str, *, timestamp_us: int) -> None:
        """Replace a summary topic's state; over its budget it keeps its start and end."""
        self._require_kind("summary", "replace_state")
        check_timestamp(timestamp_us)
        rendered = clip_middle(
            state_text(self.spec.name, text, timestamp_us), self.spec.budget_bytes
        )
        state.entries = [Entry(state.next_entry_id, timestamp_us, rendered, utf8_size(rendered))]
        state.next_entry_id += 1
        state.revision += 1

    # --- compaction ----------------------------------------------------------------

    def uncompacted_bytes(self, state: SectionState) -> int:
        """Rendered size of the entries no summary covers yet."""
        return sum(entry.size for entry in state.entries)

    def compaction_due(self, state: SectionState) -> bool:
        """The trigger: uncompacted entries, as rendered, exceed half the budget."""
        return (
            self.spec.kind != "summary"
            and 2 * self.uncompacted_bytes(state) > self.spec.budget_bytes
        )

    def _eligible(self, state: SectionState) -> list[Entry]:
        """Entries compaction may take: all but the newest exchange, which stays verbatim."""
        if self.spec.kind == "dialogue":
            return state.entries[:-1]
        return list(state.entries)

    def next_compaction(self, state: SectionState) -> CompactionRequest | None:
        """Issue the request that is due now, if any, and record it as pending.

        In order: nothing while a job is in flight; a due condense; the next batch of
        the current run; or, if the trigger holds and no failure waits for a new
        entry, a new run over every eligible entry, oldest first, in as many requests
        as the compaction input budget needs.
        """
        if state.pending is not None:
            return None
        if state.condense_due is not None:
            due = state.condense_due
            state.condense_due = None
            material = clip_middle(due.candidate, self.settings.input_budget_bytes)
            return self._issue(
                state, "condense", condense_message(material), due.entry_ids, due.candidate
            )
        while True:
            if not state.backlog:
                if state.awaiting_entry or not self.compaction_due(state):
                    return None
                state.backlog = [entry.entry_id for entry in self._eligible(state)]
                if not state.backlog:
                    return None
            texts, ids = self._batch(state)
            if self.settings.guarded:
                if (
                    state.model_skips == 0
                    and request_digest(state.summary, texts) == state.failed_request
                ):
                    keep = len(ids) // 2  # never the failed request again: a smaller batch
                    texts, ids = texts[:keep], ids[:keep]
                if state.model_skips > 0:  # backing off: the model is not asked this time
                    state.model_skips -= 1
                    self.guard.fallback(state, ids, backoff=True)
                    continue
                if not ids:  # one entry that failed alone: no smaller request exists
                    self.guard.fallback(state, self._batch(state)[1])
                    continue
            message = compact_message(state.summary, texts)
            return self._issue(state, "compact", message, tuple(ids))

    def _batch(self, state: SectionState) -> tuple[list[str], list[int]]:
        """The oldest backlog entries that fit beside the previous summary (at most
        ``batch_cap`` when set): their texts as sent and their ids.

        The first entry of a batch is always taken; if it alone exceeds the room, it
        keeps its start and end with an omission marker, so later entries still compact.
        """
        room = self.settings.input_budget_bytes - utf8_size(state.summary)
        backlog = set(state.backlog)
        cap = state.batch_cap or len(state.backlog)
        texts: list[str] = []
        ids: list[int] = []
        for entry in state.entries:
            if entry.entry_id not in backlog:
                continue
            if not texts and entry.size > room:
                texts.append(clip_middle(entry.text, room))
                ids.append(entry.entry_id)
                break
            if entry.size > room or len(ids) >= cap:
                break
            texts.append(entry.text)
            ids.append(entry.entry_id)
            room -= entry.size
        return texts, ids

    def _issue(
        self,
        state: SectionState,
        kind: CompactionKind,
        message: str,
        entry_ids: tuple[int, ...],
        candidate: str = "",
    ) -> CompactionRequest:
        prompts = self.settings.prompts
        if kind == "condense":
            prompt = prompts.condense
        elif self.spec.kind == "dialogue":
            prompt = prompts.dialogue
        else:
            prompt = prompts.source
        limit = self.spec.summary_limit_bytes
        request = CompactionRequest(
            job=JobRef(self.spec.name, state.generation, state.next_job_id),
            kind=kind,
            system_prompt=system_prompt(prompt, limit),
            user_message=message,
            limit_bytes=limit,
        )
        state.next_job_id += 1
        state.pending = PendingJob(request, entry_ids, candidate)
        return request

    def start_run(self, state: SectionState) -> bool:
        """Manual compaction (``/compact``, docs/tools.md): make every eligible entry due now.

        Whatever the half-budget trigger says, and even after a failure that waits for a
        new entry, the next ``next_compaction`` calls compact every entry the automatic
        run would take. A run already in progress counts as started. False, and nothing
        changes, when there is nothing to compact (a summary topic, or no eligible entry).
        """
        if self.spec.kind == "summary":
            return False
        if self.run_active(state):
            return True
        eligible = self._eligible(state)
        if not eligible:
            return False
        state.backlog = [entry.entry_id for entry in eligible]
        state.awaiting_entry = False
        return True

    def run_active(self, state: SectionState) -> bool:
        """A compaction run is in progress: a job in flight, a condense due or a backlog."""
        return state.pending is not None or state.condense_due is not None or bool(state.backlog)

    def merge(
        self,
        state: SectionState,
        summary: str,
        entries: Sequence[Entry],
        identities: Sequence[bytes],
    ) -> list[bytes]:
        """Merge a dumped section into ``state``; return the exchange identities it added.

        Never duplicates: a dialogue entry whose identity is known, or a topic entry with
        the same time and text as a stored one, is skipped. A summary topic keeps the
        newer state. A dumped summary joins the stored one unless it is the same text
        (the next compaction condenses them). Loading the same dump twice changes nothing.
        """
        added: list[bytes] = []
        known = state.exchange_identities
        changed = False
        if self.spec.kind == "summary":
            newest = max(entries, key=_order, default=None)
            current = state.entries[-1] if state.entries else None
            if (
                newest is not None
                and (current is None or _order(newest) > _order(current))
                and (current is None or newest.text != current.text)
            ):
                state.entries = [
                    Entry(state.next_entry_id, newest.timestamp_us, newest.text, newest.size)
                ]
                state.next_entry_id += 1
                state.revision += 1
            return added
        stored = {(entry.timestamp_us, entry.text) for entry in state.entries}
        for entry in entries:
            check_timestamp(entry.timestamp_us)
            if entry.identity:
                if entry.identity in known:
                    continue
                known.add(entry.identity)
                added.append(entry.identity)
            elif (entry.timestamp_us, entry.text) in stored:
                continue
            stored.add((entry.timestamp_us, entry.text))
            self._add_entry(state, entry.text, entry.timestamp_us, entry.identity)
            changed = True
        for identity in identities:
            if identity not in known:
                known.add(identity)
                added.append(identity)
        summary = summary.strip()
        if summary and summary != state.summary and summary not in state.summary:
            state.summary = f"{state.summary}\n{summary}" if state.summary else summary
            changed = True
        if changed:
            state.revision += 1
        return added

    def apply_result(self, state: SectionState, result: CompactionResult) -> ApplyStatus:
        """Apply a worker's result to the pending job's snapshot (docs/context.md, the
        Situation/Handling table).

        A compact result that is empty, cut off (a finish reason other than ``stop``:
        ``length``, ``content_filter``, ``cancelled``, ``error``) or an error keeps the entries and
        waits for the section's next entry; one over the
        summary limit makes a condense request due. A condense result within the limit
        is applied; a complete one still too long keeps its start and end; an empty,
        cut-off or failed one leaves the original summary to keep its start and end.
        A timed-out job is reported as a result with an ``error``.

        With ``CompactionSettings.guarded`` a compact result is first checked
        (``salience.summary_problem``): a frozen or lossy summary is ``REJECTED``, counted by
        cause, and handled as a failure; failures are never retried unchanged and the
        material's third one is compacted by the extractive fallback (``FALLBACK``). A
        condensed (or clipped) summary keeping too few of the long summary's values is
        counted ``lossy`` and replaced by the long summary's extractive summary (``FALLBACK``).
        """
        pending = state.pending
        if pending is None or result.job != pending.request.job:
            return ApplyStatus.STALE
        state.pending = None
        text = result.text.strip()
        failed = result.error is not None or result.finish_reason not in (None, "stop") or not text
        limit = self.spec.summary_limit_bytes
        guard = self.guard
        if pending.request.kind == "compact":
            problem = None if failed else guard.check(state, text, pending.entry_ids)
            if failed or problem is not None:
                eligible = [entry.entry_id for entry in self._eligible(state)]
                return guard.failed(state, pending, problem, eligible)
            if utf8_size(text) > limit:
                state.condense_due = CondenseDue(text, pending.entry_ids)
                return ApplyStatus.CONDENSE_DUE
            guard.accept(state, text, pending.entry_ids)
            return ApplyStatus.APPLIED
        if not failed and utf8_size(text) <= limit:
            summary, status = text, ApplyStatus.APPLIED
        else:
            summary = clip_middle(pending.candidate if failed else text, limit)
            status = ApplyStatus.CLIPPED
        if not guard.condensed(state, summary, pending):
            return ApplyStatus.FALLBACK
        guard.accept(state, summary, pending.entry_ids)
        return status

    @property
    def guard(self) -> SummaryGuard:
        """The section's summary guard (``guard``)."""
        return SummaryGuard(self.spec, self.settings)

    # --- rendering -----------------------------------------------------------------

    def render(self, state: SectionState) -> RenderedSection:
        """The section's blocks within its budget: the summary, then entries in time order.

        When the entries do not fit beside the summary (compaction pending or failed),
        the oldest are left out and the newest kept; a newest entry larger than the room
        left keeps its start and end. Either way an ``OverBudget`` warning is returned
        for the caller to log. The rendered texts never exceed the budget in total.
        """
        budget = self.spec.budget_bytes
        blocks: list[ContextBlock] = []
        if state.summary:
            text = clip_middle(
                summary_label(self.spec.name, dialogue=self.spec.kind == "dialogue")
                + state.summary,
                budget,
            )
            blocks.append(ContextBlock(None, text))
            budget -= utf8_size(text)
        dated = [ContextBlock(entry.timestamp_us, entry.text) for entry in state.entries]
        kept, omitted, clipped_newest = fit_newest(dated, budget)
        warning = None
        if omitted or clipped_newest:
            warning = OverBudget(
                section=self.spec.name,
                budget_bytes=self.spec.budget_bytes,
                stored_bytes=self.uncompacted_bytes(state),
                omitted_entries=omitted,
                clipped_newest=clipped_newest,
            )
        return RenderedSection(state.revision, (*blocks, *kept), warning)
