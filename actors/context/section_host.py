"""``SectionHost``: the engine's loop for one configured section, inside a section actor.

A section actor (``section_actors``) holds one ``SectionHost``, for the participants it
holds (one for a dialogue actor, all of them for a topic actor). For each change the
host applies it to the participant's ``SectionState``, asks the engine for the next
compaction and sends it to a worker, and marks the participant for a new
``SectionView``. It owns the participants' records and composes the parts that act on
them:

- ``section_residency.Residency``: which participants stay in memory and which the
  journal alone holds (a write loads one back; a snapshot reads it without keeping it);
- ``section_jobs.CompactionDispatch``: the job out at a worker, retried elsewhere on a
  timeout, failed when every worker timed out;
- ``section_publication.ViewPublication``: the views, coalesced per loop turn and
  published once the journal committed what they show.

The host itself keeps the rules between them: writes acknowledged per writer (a write
re-sent after a restart is applied once), results applied and counted (the summary
guards' refusals and fallbacks, for ``xrmq top``), manual compactions carried down the
guards' failure ladder at once and reported when their run ends, and a clear that forgets
everything of a participant, its job and its journal rows included.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
from structlog.typing import FilteringBoundLogger

from xrmq.actors.runtime import Agent, get_logger
from xrmq.actors.runtime.ratelimit import AggregatedWarnings
from xrmq.topics import Topic

from .compaction import CompactionResult
from .dump import SectionDump, dump_entries, export_section
from .engine import Section
from .journal import ContextStore, journal_name
from .journal_rows import Recovered
from .manual import MAKERS, CompactStatus
from .messages import Cleared, CompactionDone, JobAt, SectionView
from .plan import ContextPlan
from .section_jobs import CompactionDispatch, log_status
from .section_publication import ViewPublication
from .section_records import ParticipantRecord, acknowledge, failure, guarded, journal_key
from .section_residency import Residency
from .state import ApplyStatus, SectionState


class SectionHost:
    """One configured section's states for the participants an actor holds."""

    def __init__(
        self,
        agent: Agent,
        section: Section,
        plan: ContextPlan,
        result_topic: Topic,
        *,
        store: ContextStore | None = None,
        host: int = 0,
    ) -> None:
        self._agent = agent
        self.section = section
        self._store = store
        self.host = host
        self.journal_name = journal_name(section)
        self.participants: dict[str, ParticipantRecord] = {}
        """The participants in memory, least recently used first (``Residency``)."""
        self.compactions = 0
        """Compaction results applied (a summary replaced entries), for ``xrmq top``."""
        self.entries_dropped = 0
        """Entries dropped uncompacted to hold a section to its stored limit (a flood
        while compaction lagged, ``SectionSpec.stored_limit_bytes``), for ``xrmq top``."""
        self._drops: AggregatedWarnings | None = None
        self.summaries_frozen = 0
        """Model summaries refused as the previous summary again (the summary guards)."""
        self.summaries_lossy = 0
        """Model summaries refused for dropping the entries' values."""
        self.compaction_fallbacks = 0
        """Batches compacted by the extractive fallback instead of the model."""
        self._views = ViewPublication(
            agent,
            section,
            plan,
            self.participants,
            store=store,
            host=host,
            journal_name=self.journal_name,
            send=self._send,
            log=self._log,
            published=self.sweep,
        )
        self.residency = Residency(
            section,
            plan,
            self.participants,
            store=store,
            journal_name=self.journal_name,
            revive=self._journaled,
            unsaved=self._views.is_dirty,
        )
        self._jobs = CompactionDispatch(
            section,
            plan,
            result_topic,
            self.participants,
            send=self._send,
            log=self._log,
            gave_up=self._gave_up,
        )

    def gauges(self) -> dict[str, float]:
        """Compactions applied so far, the jobs still out (the backlog), and the guards'
        refusals by cause and fallbacks."""
        backlog = sum(record.job is not None for record in self.participants.values())
        return {
            "context.compactions": self.compactions,
            "context.compaction_backlog": backlog,
            "context.entries_dropped": self.entries_dropped,
            "context.participants_retired": self.residency.retired,
            "context.participants_loaded": self.residency.loaded,
            "context.summaries_frozen": self.summaries_frozen,
            "context.summaries_lossy": self.summaries_lossy,
            "context.compaction_fallbacks": self.compaction_fallbacks,
        }

    @property
    def retired(self) -> int:
        """Participants retired from memory to the journal."""
        return self.residency.retired

    @property
    def loaded(self) -> int:
        """Retired participants loaded back from the journal by a write, load, compaction
        or clear."""
        return self.residency.loaded

    @property
    def store(self) -> ContextStore | None:
        return self._store

    def participant_ids(self) -> set[str]:
        """Every participant this section holds, in memory or retired to the journal."""
        return self.residency.participant_ids()

    def sweep(self) -> None:
        """Retire idle participants to the journal (``Residency.sweep``)."""
        self.residency.sweep()

    def _tally(
        self, participant_id: str, record: ParticipantRecord, before: tuple[int, int, int]
    ) -> None:
        """Count and log what the guards did to the record's state since ``before``
        (``guarded``); a manual compaction waiting is told of the fallbacks."""
        state = record.state
        frozen, lossy, fallbacks = (a - b for a, b in zip(guarded(state), before, strict=True))
        if not (frozen or lossy or fallbacks):
            return
        if fallbacks and record.manual:
            record.made["extractive"] = record.made.get("extractive", 0) + fallbacks
        self.summaries_frozen += frozen
        self.summaries_lossy += lossy
        self.compaction_fallbacks += fallbacks
        log = self._log(participant_id)
        for cause, count in (("frozen", frozen), ("lossy", lossy)):
            if count:
                log.warning("compaction.rejected", cause=cause, count=count)
        if fallbacks:
            log.warning(
                "compaction.fallback",
                count=fallbacks,
                summary_by=state.summary_by,
                model_skips=state.model_skips,
            )

    def _log(self, participant_id: str) -> FilteringBoundLogger:
        return get_logger(
            actor=self._agent.name, participant=participant_id, section=self.section.spec.name
        )

    # --- changes --------------------------------------------------------------------

    def write(
        self,
        participant_id: str,
        change: Callable[[SectionState], object],
        ack: tuple[str, int] | None = None,
        identities: Sequence[bytes] = (),
    ) -> None:
        """Apply ``change`` to the participant's state (created empty on first write).

        ``identities`` names the exchange identities ``change`` added (the journal
        stores them as rows of their own).
        """
        record = self.residency.resident(participant_id)
        dropped = record.state.dropped_entries
        before = guarded(record.state)
        change(record.state)
        dropped = record.state.dropped_entries - dropped
        if dropped:
            self.entries_dropped += dropped
            if self._drops is None:
                self._drops = AggregatedWarnings(get_logger(actor=self._agent.name))
            self._drops.warn(
                "context.entries_dropped",
                self.section.spec.name,
                participant_id,
                dropped=dropped,
                limit_bytes=self.section.spec.stored_limit_bytes,
                reason="written faster than compaction keeps up",
            )
        record.identities.extend(identities)
        if ack is not None:
            acknowledge(record, ack)
        self._advance(participant_id, record)
        self._tally(participant_id, record, before)

    def acknowledged(self, participant_id: str, writer: str, seq: int) -> bool:
        """Whether the participant's state already holds write ``seq`` of ``writer`` (a
        write re-sent after a restart is applied once, whichever writers came between:
        each writer's last applied write is kept, in the journal too)."""
        record = self.residency.get(participant_id)
        return record is not None and seq <= record.acks.get(writer, 0)

    def touch(self, participant_id: str, ack: tuple[str, int]) -> None:
        """Acknowledge a write that changed nothing (its view still tells the writer)."""
        record = self.residency.resident(participant_id)
        acknowledge(record, ack)
        self._views.mark_dirty(participant_id)

    def restore(self, participant_id: str, recovered: Recovered) -> None:
        """Take a participant's state from the journal (call ``resume`` once the loop runs)."""
        self.participants[participant_id] = self._journaled(recovered)

    def _journaled(self, recovered: Recovered) -> ParticipantRecord:
        record = ParticipantRecord(recovered.state, recovered.acks)
        record.journaled = journal_key(record)
        record.view = self._views.view(record, self.section.render(record.state).blocks)
        return record

    def view_of(self, recovered: Recovered) -> SectionView:
        """The view of a state read from the journal, without holding it."""
        view = self._journaled(recovered).view
        assert view is not None  # rendered by _journaled
        return view

    def resume(self) -> None:
        """After ``restore``: re-issue pending compactions and publish every view anew;
        start retiring idle participants (``sweep``)."""
        self.residency.start()
        for participant_id, record in self.participants.items():
            pending = record.state.pending
            if pending is not None and record.job is None:
                self._jobs.dispatch(participant_id, record, pending.request)
                self._views.mark_dirty(participant_id)
            else:
                self._advance(participant_id, record)

    def compact_now(self, participant_id: str, writer: str, seq: int) -> None:
        """Manual compaction: compact every eligible entry now; report to ``writer`` when done."""
        record = self.residency.get(participant_id)
        if record is None or not self.section.start_run(record.state):
            self._views.report(participant_id, writer, seq, CompactStatus.NOTHING_TO_CONDENSE)
            return
        record.manual.append((writer, seq))
        before = guarded(record.state)
        self._advance(participant_id, record)  # a model backing off: the fallback compacts now
        self._tally(participant_id, record, before)
        self._manual_done(participant_id, record, None)

    def load(self, participant_id: str, dump: SectionDump, ack: tuple[str, int] | None) -> None:
        """Merge a dumped section into the participant's state (``Section.merge``)."""
        if dump.kind != self.section.spec.kind:
            self._log(participant_id).warning("context.load_kind_mismatch", dumped=dump.kind)
            if ack is not None:
                self.touch(participant_id, ack)
            return
        added: list[bytes] = []

        def merge(state: SectionState) -> None:
            added.extend(
                self.section.merge(state, dump.summary, dump_entries(dump), dump.identities)
            )

        self.write(participant_id, merge, ack, added)

    def export(self, participant_id: str) -> SectionDump | None:
        record = self.residency.peek(participant_id)
        return None if record is None else export_section(self.section, record.state)

    def views(self, participant_id: str | None = None) -> list[tuple[str, SectionView]]:
        """The latest published view of every participant (or of one), for a replica's
        snapshot: what the journal holds, never a change it has not committed yet (a
        retired participant's is rendered from the journal)."""
        ids = sorted(self.participant_ids()) if participant_id is None else [participant_id]
        runtime = self._agent.runtime
        epoch = runtime.epoch if runtime is not None and runtime.running else 0
        views = []
        if participant_id is None:
            self.residency.prefetch(ids)
        try:
            for pid in ids:
                record = self.residency.peek(pid)
                if record is not None and record.view is not None:
                    views.append((pid, msgspec.structs.replace(record.view, epoch=epoch)))
        finally:
            if participant_id is None:
                self.residency.forget_prefetched()
        return views

    def result(self, participant_id: str, done: CompactionDone) -> None:
        """Apply a worker's result; a result for a forgotten state is dropped."""
        record = self.residency.get(participant_id)
        if record is None:
            self._log(participant_id).debug(
                "compaction.stale", job=done.result.job.job_id, reason="cleared"
            )
            return
        before = guarded(record.state)
        status = self.section.apply_result(record.state, done.result)
        if status in (ApplyStatus.APPLIED, ApplyStatus.CLIPPED):
            self.compactions += 1
            if record.manual:
                record.made["model"] = record.made.get("model", 0) + 1
        if status is not ApplyStatus.STALE:
            self._jobs.settle(participant_id, record, done)
        log_status(self._log(participant_id), status, done.result)
        self._go_on_now(record, status)
        self._advance(participant_id, record)
        self._tally(participant_id, record, before)
        if status is not ApplyStatus.STALE:
            self._manual_done(
                participant_id,
                record,
                failure(done.result)
                if status in (ApplyStatus.FAILED, ApplyStatus.REJECTED)
                else None,
            )

    def _gave_up(
        self, participant_id: str, record: ParticipantRecord, result: CompactionResult
    ) -> None:
        """Apply the failure of a job every worker timed out on (``CompactionDispatch``)."""
        before = guarded(record.state)
        status = self.section.apply_result(record.state, result)
        log_status(self._log(participant_id), status, result)
        self._go_on_now(record, status)
        self._advance(participant_id, record)
        self._tally(participant_id, record, before)
        self._manual_done(
            participant_id, record, result.error if status is ApplyStatus.FAILED else None
        )

    def _go_on_now(self, record: ParticipantRecord, status: ApplyStatus) -> None:
        """A manual compaction does not wait for the section's next entry.

        Guarded, the engine answers a material's first failure (refused, cut off, an
        error) by waiting for the next entry (``SectionState.awaiting_entry``); a user who
        asked to compact now would get nothing. So the run starts again at once: the
        engine never resends the failed request (its retry is the older half), and its
        ladder goes on to a smaller batch, then the extractive fallback, so the run ends
        with the entries in the summary. Unguarded, the seed's rule stands (the failure
        is reported and the entries stay).
        """
        if (
            record.manual
            and self.section.settings.guarded
            and status in (ApplyStatus.FAILED, ApplyStatus.REJECTED)
            and record.state.awaiting_entry
        ):
            self.section.start_run(record.state)

    def _manual_done(
        self, participant_id: str, record: ParticipantRecord, failed: str | None
    ) -> None:
        """Report the waiting manual compactions once their run ended: COMPACTED, with
        what made the summaries, or SUMMARIZE_FAILED with why (``failed``)."""
        if not record.manual or self.section.run_active(record.state):
            return
        waiting, record.manual = record.manual, []
        made, record.made = record.made, {}
        status = CompactStatus.COMPACTED if failed is None else CompactStatus.SUMMARIZE_FAILED
        made_by = tuple(m for m in MAKERS if made.get(m)) if failed is None else ()
        for writer, seq in waiting:
            self._views.report(participant_id, writer, seq, status, failed or "", made_by)

    def clear(self, participant_id: str | None) -> Cleared:
        """Forget one participant (every participant for None); return what was forgotten
        (a retired participant's generation is read from the journal)."""
        ids = list(self.participant_ids()) if participant_id is None else [participant_id]
        generations: list[str] = []
        jobs: list[JobAt] = []
        residency = self.residency
        if participant_id is None:
            residency.prefetch(ids)  # the retired ones' generations, read in one go
        for pid in ids:
            record = self.participants.pop(pid, None) or residency.peek(pid)
            residency.retired_ids.discard(pid)
            self._views.discard(pid)
            if record is None:
                continue
            generations.append(record.state.generation)
            if record.job is not None:
                record.job.timer.cancel()
                jobs.append(JobAt(record.job.job, pid, tuple(record.job.workers)))
            for writer, seq in record.manual:
                self._views.report(
                    pid, writer, seq, CompactStatus.SUMMARIZE_FAILED, "the participant was cleared"
                )
        residency.forget_prefetched()
        if self._store is not None:
            self._store.delete(participant_id, self.journal_name)
        return Cleared(tuple(generations), tuple(jobs))

    def stop(self) -> None:
        """Cancel timers and pending publication (the actor is stopping)."""
        self.residency.stop()
        for record in self.participants.values():
            if record.job is not None:
                record.job.timer.cancel()
        self._views.stop()

    def _advance(self, participant_id: str, record: ParticipantRecord) -> None:
        request = self.section.next_compaction(record.state)
        if request is not None:
            self._jobs.dispatch(participant_id, record, request)
        self._views.mark_dirty(participant_id)

    def _send(self, topic: Topic, message: object, participant_id: str) -> None:
        runtime = self._agent.runtime
        if runtime is not None and runtime.running:
            runtime.send(topic, message, participant_id=participant_id, source=self._agent.name)
