"""Section actors: the dialogue of one participant, and one configured context topic.

Both are thin shells around ``SectionHost``, which runs the engine's loop for the
participants an actor holds (one for a dialogue actor, all of them for a topic actor):
change a state, ask for the next compaction and send it to a worker, and publish a new
``SectionView`` when the rendered section can have changed.

State is only touched by synchronous code (handlers that never await, and timer
callbacks), so on the event loop every change is atomic: a view is never rendered from
a half-applied write.

Compaction jobs go to one worker each (``plan.compaction_workers`` mailboxes, chosen by
a stable hash of participant, section and job number). A job without a result after
``compaction_timeout_s`` (a slow or dead worker) is cancelled there and sent to the next
worker; the first result wins and later copies are stale. When every worker was tried
the job fails (entries kept, retried after the section's next entry). Nothing is lost
meanwhile: entries stay until a summary replaces them.

Views are coalesced: changes mark the participant dirty and one callback per loop turn
publishes one view per dirty participant, so a burst of sensor updates costs one render.

With a journal (``store.ContextStore``), that callback is the store's commit: every
section actor of the process stages its dirty participants, they are committed in one
transaction, and only then are their views published, so a write a view acknowledges
is durable. A ``ContextHost`` per process restores the journal before the runtime
reports ready: each participant's state, re-issuing its pending compaction, and
publishing its views under the new epoch; then it announces ``HostStarted`` and
answers every replica's request for a full snapshot.

With a journal, a topic section keeps in memory only the participants written within
``retire_idle_s``, at most ``max_resident_participants`` (``ContextPlan``): the others
are retired to the journal once it holds exactly what memory holds (nothing dirty, no
transaction being written, no compaction out), so retiring loses nothing. A retired
participant's next write, load, compaction or clear reads it back first (a point read
on the journal's thread, which the loop waits for, after the transaction in flight);
a fetch, a snapshot page or a dump reads it without keeping it. A context process
opens its journal with the topic sections read on demand (``TOPIC_JOURNAL_PREFIX``),
so a restart reads only their participant ids. Dialogues are per-participant actors
and are all restored at start.
"""

from __future__ import annotations

import asyncio
import os
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar
from uuid import uuid4

import msgspec

from xrmq.actors.runtime import (
    DEFERRED_REPLY,
    Agent,
    AgentRuntime,
    AskError,
    Handler,
    Handlers,
    RuntimeContext,
    get_logger,
    shard_of,
)
from xrmq.actors.runtime.ratelimit import AggregatedWarnings
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import Topic

from .compaction import CompactionRequest, CompactionResult, JobRef
from .dump import ParticipantDump, SectionDump, dump_entries, export_section
from .engine import ApplyStatus, PendingJob, Section, SectionState
from .journal import ContextStore
from .journal_rows import Recovered
from .manual import CompactStatus
from .messages import (
    CancelJobs,
    Cleared,
    ClearSection,
    CompactionDone,
    CompactionJob,
    CompactReport,
    CompactSection,
    HostDump,
    HostStarted,
    HostSync,
    HostViews,
    JobAt,
    LoadSection,
    RecordExchanges,
    SectionView,
    TopicWrite,
)
from .plan import ContextPlan


class _Job:
    """The pending job of one participant's section: where it went and its timer."""

    __slots__ = ("job", "timer", "workers")

    def __init__(self, job: JobRef, worker: int, timer: asyncio.TimerHandle) -> None:
        self.job = job
        self.workers = [worker]
        self.timer = timer


class _Participant:
    __slots__ = (
        "ack",
        "acks",
        "identities",
        "job",
        "journaled",
        "manual",
        "published",
        "state",
        "stored_job",
        "used",
        "view",
        "warned",
    )

    def __init__(self, state: SectionState, acks: tuple[tuple[str, int], ...] = ()) -> None:
        self.state = state
        self.job: _Job | None = None
        self.acks: dict[str, int] = dict(acks)
        """The last write applied of each writer (manager), least recent first; bounded
        (``MAX_WRITERS``), so a re-sent write of any of them is recognized."""
        self.ack: tuple[str, int] = acks[-1] if acks else ("", 0)
        """The latest write applied, of any writer."""
        self.published: tuple[int, tuple[str, int]] | None = None
        self.warned = -1
        self.identities: list[bytes] = []
        """Exchange identities added since the journal last stored this state."""
        self.journaled: tuple | None = None
        self.stored_job: PendingJob | None = state.pending
        self.manual: list[tuple[str, int]] = []
        """Manual compactions (writer, seq) waiting for the run to end."""
        self.view: SectionView | None = None
        """The latest view published (so journaled): what a snapshot shows."""
        self.used = time.monotonic()
        """When it was last written (retirement to the journal goes by it)."""


MAX_WRITERS = 16
"""Writers (managers) whose last applied write a section remembers per participant. A
manager re-sends only while it lives, and a restarted one has a new id, so these are
the live managers writing that participant's section, not a growing history."""


def _acknowledge(record: _Participant, ack: tuple[str, int]) -> None:
    writer, seq = ack
    acks = record.acks
    acks.pop(writer, None)
    acks[writer] = seq
    if len(acks) > MAX_WRITERS:
        del acks[next(iter(acks))]
    record.ack = ack


def journal_name(section: Section) -> str:
    """A section's name in the journal: ``dialogue``, or ``topic:<name>`` (a topic may
    itself be called "dialogue")."""
    return (
        "dialogue"
        if section.spec.kind == "dialogue"
        else f"{TOPIC_JOURNAL_PREFIX}{section.spec.name}"
    )


TOPIC_JOURNAL_PREFIX = "topic:"
"""What every topic section's journal name starts with: a context process opens its
journal with ``open_store(..., on_demand_prefix=TOPIC_JOURNAL_PREFIX)``, so its topic
sections are read when first used, not at start."""


def _journal_key(record: _Participant) -> tuple:
    state = record.state
    return (
        state.revision,
        record.ack,
        state.next_job_id,
        state.next_entry_id,
        len(state.backlog),
        state.awaiting_entry,
        id(state.pending),
        id(state.condense_due),
        state.generation,
    )


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
        self._plan = plan
        self._result_topic = result_topic
        self._dialogue = section.spec.kind == "dialogue"
        self._store = store
        self.host = host
        self.journal_name = journal_name(section)
        self.participants: dict[str, _Participant] = {}
        self._dirty: set[str] = set()
        self._flush_handle: asyncio.Handle | None = None
        self._reports: list[tuple[Topic, CompactReport, str]] = []
        self.compactions = 0
        """Compaction results applied (a summary replaced entries), for ``xrmq top``."""
        self.entries_dropped = 0
        """Entries dropped uncompacted to hold a section to its stored limit (a flood
        while compaction lagged, ``SectionSpec.stored_limit_bytes``), for ``xrmq top``."""
        self._drops: AggregatedWarnings | None = None
        self._retiring = store is not None and not self._dialogue
        """Whether idle participants are retired to the journal (a topic section with a
        journal; a dialogue actor holds one participant and retires whole)."""
        self.retired = 0
        """Participants retired from memory to the journal."""
        self._retired: set[str] = set()
        """The participants the journal alone holds (``adopt_journal``, ``sweep``): only
        these are read from it, so a new participant's first write costs no read."""
        self.loaded = 0
        """Retired participants loaded back from the journal by a write, load, compaction
        or clear."""
        self._sweeper: asyncio.TimerHandle | None = None
        self._prefetched: dict[str, _Participant] = {}
        """Retired participants read for the snapshot page being built (``prefetch``)."""
        self.summaries_frozen = 0
        """Model summaries refused as the previous summary again (issue 32's guards)."""
        self.summaries_lossy = 0
        """Model summaries refused for dropping the entries' values."""
        self.compaction_fallbacks = 0
        """Batches compacted by the extractive fallback instead of the model."""

    def gauges(self) -> dict[str, float]:
        """Compactions applied so far, the jobs still out (the backlog), and the guards'
        refusals by cause and fallbacks."""
        backlog = sum(record.job is not None for record in self.participants.values())
        return {
            "context.compactions": self.compactions,
            "context.compaction_backlog": backlog,
            "context.entries_dropped": self.entries_dropped,
            "context.participants_retired": self.retired,
            "context.participants_loaded": self.loaded,
            "context.summaries_frozen": self.summaries_frozen,
            "context.summaries_lossy": self.summaries_lossy,
            "context.compaction_fallbacks": self.compaction_fallbacks,
        }

    def _tally(
        self, participant_id: str, state: SectionState, before: tuple[int, int, int]
    ) -> None:
        """Count and log what the guards did to ``state`` since ``before`` (``_guarded``)."""
        frozen, lossy, fallbacks = (a - b for a, b in zip(_guarded(state), before, strict=True))
        if not (frozen or lossy or fallbacks):
            return
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

    @property
    def _runtime(self) -> AgentRuntime | None:
        runtime = self._agent.runtime
        return runtime if runtime is not None and runtime.running else None

    def _log(self, participant_id: str):
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
        record = self._resident(participant_id)
        dropped = record.state.dropped_entries
        guarded = _guarded(record.state)
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
            _acknowledge(record, ack)
        self._advance(participant_id, record)
        self._tally(participant_id, record.state, guarded)

    def acknowledged(self, participant_id: str, writer: str, seq: int) -> bool:
        """Whether the participant's state already holds write ``seq`` of ``writer`` (a
        write re-sent after a restart is applied once, whichever writers came between:
        each writer's last applied write is kept, in the journal too)."""
        record = self._get(participant_id)
        return record is not None and seq <= record.acks.get(writer, 0)

    def touch(self, participant_id: str, ack: tuple[str, int]) -> None:
        """Acknowledge a write that changed nothing (its view still tells the writer)."""
        record = self._resident(participant_id)
        _acknowledge(record, ack)
        self._mark_dirty(participant_id)

    def restore(self, participant_id: str, recovered: Recovered) -> None:
        """Take a participant's state from the journal (call ``resume`` once the loop runs)."""
        self.participants[participant_id] = self._journaled(recovered)

    def _journaled(self, recovered: Recovered) -> _Participant:
        record = _Participant(recovered.state, recovered.acks)
        record.journaled = _journal_key(record)
        record.view = self._view(record, self.section.render(record.state).blocks)
        return record

    def view_of(self, recovered: Recovered) -> SectionView:
        """The view of a state read from the journal, without holding it."""
        view = self._journaled(recovered).view
        assert view is not None  # rendered by _journaled
        return view

    # --- retirement to the journal ----------------------------------------------------

    def _get(self, participant_id: str) -> _Participant | None:
        """The participant's state in memory, loaded back from the journal if it was
        retired (so a write never lands on an empty state); None if neither holds it."""
        record = self.participants.get(participant_id)
        if record is not None:
            if self._retiring:
                self.participants[participant_id] = self.participants.pop(participant_id)
            record.used = time.monotonic()
            return record
        if participant_id not in self._retired or self._store is None:
            return None
        self._retired.discard(participant_id)
        recovered = self._store.read_section(participant_id, self.journal_name)
        if recovered is None:
            return None
        record = self.participants[participant_id] = self._journaled(recovered)
        record.published = (record.state.revision, record.ack)  # the view it had
        self.loaded += 1
        return record

    def _resident(self, participant_id: str) -> _Participant:
        """``_get``, or a new empty state (a first write)."""
        record = self._get(participant_id)
        if record is None:
            record = self.participants[participant_id] = _Participant(
                self.section.new_state(uuid4().hex)
            )
        return record

    def _peek(self, participant_id: str) -> _Participant | None:
        """The participant's state, read from the journal without keeping it in memory if
        it was retired (a snapshot, a fetch or a dump)."""
        record = self.participants.get(participant_id) or self._prefetched.get(participant_id)
        if record is None and participant_id in self._retired and self._store is not None:
            recovered = self._store.read_section(participant_id, self.journal_name)
            if recovered is None:
                self._retired.discard(participant_id)  # quarantined: nothing to read again
            else:
                record = self._journaled(recovered)
        return record

    def prefetch(self, participant_ids: Sequence[str]) -> None:
        """Read the retired among ``participant_ids`` from the journal in one go, for the
        reads of a snapshot page that follow (synchronously: nothing changes meanwhile);
        ``forget_prefetched`` once the page is built."""
        wanted = [pid for pid in participant_ids if pid in self._retired]
        if wanted and self._store is not None:
            found = self._store.read_sections(self.journal_name, wanted)
            for pid in wanted:
                recovered = found.get(pid)
                if recovered is None:
                    self._retired.discard(pid)  # quarantined: nothing to read again
                else:
                    self._prefetched[pid] = self._journaled(recovered)

    def forget_prefetched(self) -> None:
        self._prefetched = {}

    def participant_ids(self) -> set[str]:
        """Every participant this section holds, in memory or retired to the journal."""
        return set(self.participants) | self._retired

    def adopt_journal(self) -> None:
        """Count as retired every participant the journal holds and memory does not (a
        journal opened with this section read on demand, ``open_store``'s
        ``on_demand_prefix``): their ids are read, their states when first used."""
        if self._retiring and self._store is not None:
            journaled = self._store.section_participants(self.journal_name)
            self._retired.update(pid for pid in journaled if pid not in self.participants)

    def _retirable(self, participant_id: str, record: _Participant) -> bool:
        state = record.state
        return (
            participant_id not in self._dirty
            and record.job is None
            and not record.manual
            and not record.identities
            and state.pending is None
            and record.journaled == _journal_key(record)
            and record.published == (state.revision, record.ack)
        )

    def sweep(self) -> None:
        """Retire to the journal the participants unused for ``retire_idle_s``, and the
        least recently used beyond ``max_resident_participants``: only what the journal
        holds as it is in memory (nothing dirty, no transaction being written, no
        compaction out), so dropping it from memory loses nothing."""
        store = self._store
        if not self._retiring or store is None or store.writing:
            return
        over = len(self.participants) - self._plan.max_resident_participants
        idle_before = time.monotonic() - self._plan.retire_idle_s
        for participant_id in list(self.participants):  # least recently used first
            record = self.participants[participant_id]
            if over <= 0 and record.used > idle_before:
                break
            if self._retirable(participant_id, record):
                del self.participants[participant_id]
                self._retired.add(participant_id)
                self.retired += 1
                over -= 1

    def _tick(self) -> None:
        self.sweep()
        self._sweeper = asyncio.get_running_loop().call_later(self._sweep_every_s, self._tick)

    @property
    def _sweep_every_s(self) -> float:
        return min(60.0, self._plan.retire_idle_s / 4)

    def resume(self) -> None:
        """After ``restore``: re-issue pending compactions and publish every view anew;
        start retiring idle participants (``sweep``)."""
        if self._retiring and self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(self._sweep_every_s, self._tick)
        for participant_id, record in self.participants.items():
            pending = record.state.pending
            if pending is not None and record.job is None:
                self._dispatch(participant_id, record, pending.request)
                self._mark_dirty(participant_id)
            else:
                self._advance(participant_id, record)

    def compact_now(self, participant_id: str, writer: str, seq: int) -> None:
        """Manual compaction: compact every eligible entry now; report to ``writer`` when done."""
        record = self._get(participant_id)
        if record is None or not self.section.start_run(record.state):
            self._report(participant_id, writer, seq, CompactStatus.NOTHING_TO_CONDENSE)
            return
        record.manual.append((writer, seq))
        self._advance(participant_id, record)

    @property
    def store(self) -> ContextStore | None:
        return self._store

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
        record = self._peek(participant_id)
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
            self.prefetch(ids)
        try:
            for pid in ids:
                record = self._peek(pid)
                if record is not None and record.view is not None:
                    views.append((pid, msgspec.structs.replace(record.view, epoch=epoch)))
        finally:
            if participant_id is None:
                self.forget_prefetched()
        return views

    def _view(self, record: _Participant, blocks) -> SectionView:
        runtime = self._agent.runtime
        epoch = runtime.epoch if runtime is not None and runtime.running else 0
        state = record.state
        return SectionView(
            self.section.spec.name,
            self._dialogue,
            state.generation,
            state.revision,
            blocks,
            *record.ack,
            host=self.host,
            epoch=epoch,
            acks=tuple(record.acks.items()),
        )

    def _report(
        self, participant_id: str, writer: str, seq: int, status: CompactStatus, detail: str = ""
    ) -> None:
        """Report a manual compaction after the views of this turn (so the writer's next
        ``blocks()`` shows what it did)."""
        report = CompactReport(self.section.spec.name, seq, status.value, detail)
        self._reports.append((self._plan.topics.compacted(writer), report, participant_id))
        self._mark_dirty(participant_id)

    def _manual_done(self, participant_id: str, record: _Participant, failed: str | None) -> None:
        if not record.manual or (failed is None and self.section.run_active(record.state)):
            return
        waiting, record.manual = record.manual, []
        status = CompactStatus.COMPACTED if failed is None else CompactStatus.SUMMARIZE_FAILED
        for writer, seq in waiting:
            self._report(participant_id, writer, seq, status, failed or "")

    def result(self, participant_id: str, done: CompactionDone) -> None:
        """Apply a worker's result; a result for a forgotten state is dropped."""
        record = self._get(participant_id)
        if record is None:
            self._log(participant_id).debug(
                "compaction.stale", job=done.result.job.job_id, reason="cleared"
            )
            return
        job = record.job
        guarded = _guarded(record.state)
        status = self.section.apply_result(record.state, done.result)
        if status in (ApplyStatus.APPLIED, ApplyStatus.CLIPPED):
            self.compactions += 1
        if status is not ApplyStatus.STALE and job is not None and job.job == done.result.job:
            job.timer.cancel()
            record.job = None
            for worker in job.workers:
                if worker != done.worker:  # a retried copy still running elsewhere
                    self._send(
                        self._plan.topics.worker_cancel(worker),
                        CancelJobs((job.job,)),
                        participant_id,
                    )
        self._log_status(participant_id, status, done.result)
        self._advance(participant_id, record)
        self._tally(participant_id, record.state, guarded)
        if status is not ApplyStatus.STALE:
            self._manual_done(
                participant_id,
                record,
                _failure(done.result)
                if status in (ApplyStatus.FAILED, ApplyStatus.REJECTED)
                else None,
            )

    def clear(self, participant_id: str | None) -> Cleared:
        """Forget one participant (every participant for None); return what was forgotten
        (a retired participant's generation is read from the journal)."""
        ids = list(self.participant_ids()) if participant_id is None else [participant_id]
        generations: list[str] = []
        jobs: list[JobAt] = []
        if participant_id is None:
            self.prefetch(ids)  # the retired ones' generations, read in one go
        for pid in ids:
            record = self.participants.pop(pid, None) or self._peek(pid)
            self._retired.discard(pid)
            self._dirty.discard(pid)
            if record is None:
                continue
            generations.append(record.state.generation)
            if record.job is not None:
                record.job.timer.cancel()
                jobs.append(JobAt(record.job.job, pid, tuple(record.job.workers)))
            for writer, seq in record.manual:
                self._report(
                    pid, writer, seq, CompactStatus.SUMMARIZE_FAILED, "the participant was cleared"
                )
        self.forget_prefetched()
        if self._store is not None:
            self._store.delete(participant_id, self.journal_name)
        return Cleared(tuple(generations), tuple(jobs))

    def stop(self) -> None:
        """Cancel timers and pending publication (the actor is stopping)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for record in self.participants.values():
            if record.job is not None:
                record.job.timer.cancel()
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None

    # --- compaction -----------------------------------------------------------------

    def _advance(self, participant_id: str, record: _Participant) -> None:
        request = self.section.next_compaction(record.state)
        if request is not None:
            self._dispatch(participant_id, record, request)
        self._mark_dirty(participant_id)

    def _dispatch(
        self, participant_id: str, record: _Participant, request: CompactionRequest
    ) -> None:
        workers = self._plan.compaction_workers
        seed = zlib.crc32(f"{self.section.spec.name}\x00{participant_id}".encode())
        worker = (seed + request.job.job_id) % workers
        timer = asyncio.get_running_loop().call_later(
            self._plan.compaction_timeout_s, self._timed_out, participant_id, request.job
        )
        record.job = _Job(request.job, worker, timer)
        self._send_job(participant_id, request, worker, attempt=0)

    def _send_job(
        self, participant_id: str, request: CompactionRequest, worker: int, attempt: int
    ) -> None:
        job = CompactionJob(request, self._result_topic.name, attempt)
        self._send(self._plan.topics.worker_jobs(worker), job, participant_id)

    def _timed_out(self, participant_id: str, job: JobRef) -> None:
        record = self.participants.get(participant_id)
        if record is None or record.job is None or record.job.job != job:
            return
        pending = record.state.pending
        tried = record.job.workers
        log = self._log(participant_id)
        self._send(self._plan.topics.worker_cancel(tried[-1]), CancelJobs((job,)), participant_id)
        if pending is not None and len(tried) < self._plan.compaction_workers:
            worker = (tried[0] + len(tried)) % self._plan.compaction_workers
            log.warning(
                "compaction.retry", job=job.job_id, timed_out_worker=tried[-1], worker=worker
            )
            tried.append(worker)
            record.job.timer = asyncio.get_running_loop().call_later(
                self._plan.compaction_timeout_s, self._timed_out, participant_id, job
            )
            self._send_job(participant_id, pending.request, worker, attempt=len(tried) - 1)
            return
        log.warning("compaction.gave_up", job=job.job_id, workers=list(tried))
        record.job = None
        result = CompactionResult(
            job, error=f"timeout after {self._plan.compaction_timeout_s}s at workers {tried}"
        )
        guarded = _guarded(record.state)
        status = self.section.apply_result(record.state, result)
        self._log_status(participant_id, status, result)
        self._advance(participant_id, record)
        self._tally(participant_id, record.state, guarded)
        self._manual_done(
            participant_id, record, result.error if status is ApplyStatus.FAILED else None
        )

    def _log_status(
        self, participant_id: str, status: ApplyStatus, result: CompactionResult
    ) -> None:
        log = self._log(participant_id)
        if status in (ApplyStatus.FAILED, ApplyStatus.REJECTED):
            log.warning(
                f"compaction.{status.value}",
                job=result.job.job_id,
                error=result.error,
                finish_reason=result.finish_reason,
                empty=not result.text.strip(),
            )
        elif status is ApplyStatus.CLIPPED:
            log.warning("compaction.clipped", job=result.job.job_id)
        elif status is ApplyStatus.STALE:
            log.info("compaction.stale", job=result.job.job_id)
        else:
            log.debug(f"compaction.{status.value}", job=result.job.job_id)

    # --- views ------------------------------------------------------------------------

    def _mark_dirty(self, participant_id: str) -> None:
        self._dirty.add(participant_id)
        if self._store is not None:
            self._store.schedule(self)
        elif self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        reports, self._reports = self._reports, []
        self._publish(self._collect(None), reports)

    def _publish(
        self, views: list[tuple[str, SectionView]], reports: list[tuple[Topic, CompactReport, str]]
    ) -> None:
        topic = self._plan.topics.view
        for participant_id, view in views:
            record = self.participants.get(participant_id)
            if record is not None and record.state.generation == view.generation:
                record.view = view
            self._send(topic, view, participant_id)
        for report_topic, report, participant_id in reports:
            self._send(report_topic, report, participant_id)
        self.sweep()

    def stage(self, store: ContextStore) -> tuple[list[Callable[[], None]], Callable[[], None]]:
        """The journal's commit of this turn: stage every dirty participant's state;
        return the sending of their views, which the store runs once committed, and
        what undoes the staging if the commit fails (the next commit stages all again)."""
        staged: list[tuple[str, list[bytes], PendingJob | None]] = []
        views = self._collect(store, staged)
        reports, self._reports = self._reports, []

        def failed() -> None:
            for participant_id, identities, stored_job in staged:
                record = self.participants.get(participant_id)
                if record is not None:
                    record.identities[:0] = identities
                    record.stored_job = stored_job
                    record.journaled = record.published = None
                    self._dirty.add(participant_id)
            self._reports[:0] = reports

        return ([lambda: self._publish(views, reports)] if views or reports else []), failed

    def _collect(
        self,
        store: ContextStore | None,
        staged: list[tuple[str, list[bytes], PendingJob | None]] | None = None,
    ) -> list[tuple[str, SectionView]]:
        dirty, self._dirty = self._dirty, set()
        views: list[tuple[str, SectionView]] = []
        name = self.journal_name
        for participant_id in dirty:
            record = self.participants.get(participant_id)
            if record is None:
                continue
            state = record.state
            if store is not None:
                journal_key = _journal_key(record)
                if journal_key != record.journaled or record.identities:
                    job: PendingJob | bool | None = (
                        True if state.pending is record.stored_job else state.pending
                    )
                    store.put(participant_id, name, state, record.acks, record.identities, job)
                    if staged is not None:
                        staged.append((participant_id, record.identities, record.stored_job))
                    record.identities = []
                    record.stored_job = state.pending
                    record.journaled = journal_key
            key = (state.revision, record.ack)
            if key == record.published:
                continue
            rendered = self.section.render(state)
            if rendered.warning is not None and record.warned != state.revision:
                record.warned = state.revision
                self._log(participant_id).warning(
                    "context.over_budget", message=rendered.warning.message()
                )
            views.append((participant_id, self._view(record, rendered.blocks)))
            record.published = key
        return views

    def _send(self, topic: Topic, message: object, participant_id: str) -> None:
        runtime = self._runtime
        if runtime is not None:
            runtime.send(topic, message, participant_id=participant_id, source=self._agent.name)


def _failure(result: CompactionResult) -> str:
    """Why a compact result was not applied (failed, or refused by the summary check)."""
    if result.error is not None:
        return result.error
    if result.finish_reason not in (None, "stop"):
        return f"the model stopped: {result.finish_reason}"
    if result.text.strip():
        return "the model's summary was refused: the previous summary again, or values lost"
    return "the model returned no summary"


class DialogueSectionActor(Agent):
    """The dialogue section of one participant (a keyed actor, spawned on first message).

    After a clear it holds nothing, and it retires itself once its mailbox is idle, so
    a departed participant leaves no actor behind. A participant the journal holds is
    spawned at start with its recovered state. The runtime keeps at most its
    ``keyed_instances`` of these actors (least recently used retired first): with a
    journal a retired one's state is in the journal alone, and the actor spawned by the
    participant's next message starts from it (``ContextHost.take``), re-issuing a
    pending compaction.
    """

    def __init__(
        self,
        participant_id: str,
        plan: ContextPlan,
        kind: str,
        *,
        store: ContextStore | None = None,
        host: int = 0,
        recovered: Recovered | None = None,
        context_host: ContextHost | None = None,
    ) -> None:
        self.key = participant_id
        self.kind = kind
        self._context_host = context_host
        self._resumed = recovered is None
        self.host = SectionHost(
            self, plan.config.dialogue, plan, plan.topics.dialogue_result, store=store, host=host
        )
        if recovered is not None:
            self.host.restore(participant_id, recovered)
        self._retiring: asyncio.Task[None] | None = None
        """The retirement after a clear: held, as the loop keeps only weak references to tasks."""

    def gauges(self) -> dict[str, float]:
        return {**self.host.gauges(), "context.participants": len(self.host.participants)}

    def resume(self) -> None:
        """Once, for a state from the journal: re-issue its pending compaction and
        publish its view (``SectionHost.resume``)."""
        if not self._resumed:
            self._resumed = True
            self.host.resume()

    def _held(self) -> None:
        if self._context_host is not None and self.host.participants:
            self._context_host.dialogues_held.add(self.key)

    async def on_start(self) -> None:
        self.resume()

    async def on_write(self, message: RecordExchanges, ctx: RuntimeContext) -> None:
        section = self.host.section
        added: list[bytes] = []

        def add(state: SectionState) -> None:
            for record in message.exchanges:
                if section.add_exchange(
                    state,
                    record.identity,
                    record.request,
                    record.answer,
                    timestamp_us=record.timestamp_us,
                ):
                    added.append(record.identity)

        self.host.write(self.key, add, ack=(message.writer, message.seq), identities=added)
        self._held()

    async def on_load(self, message: LoadSection, ctx: RuntimeContext) -> None:
        if self.host.acknowledged(self.key, message.writer, message.seq):
            return
        self.host.load(self.key, message.dump, (message.writer, message.seq))
        self._held()

    async def on_migrate(self, message: LoadSection, ctx: RuntimeContext) -> bool:
        """The participant's dialogue from another shard's journal (the shard count changed):
        merged as a load is (never duplicating an exchange, so a repeat changes nothing);
        answered once this shard's journal holds it."""
        self.host.load(self.key, message.dump, None)
        self._held()
        store = self.host.store
        if store is not None:
            await store.barrier()
        return True

    async def on_compact(self, message: CompactSection, ctx: RuntimeContext) -> None:
        self.host.compact_now(self.key, message.writer, message.seq)

    async def on_result(self, message: CompactionDone, ctx: RuntimeContext) -> None:
        self.host.result(self.key, message)

    async def on_clear(self, message: ClearSection, ctx: RuntimeContext) -> Cleared:
        cleared = self.host.clear(self.key)
        if self._context_host is not None:
            self._context_host.dialogues_held.discard(self.key)
        self._retiring = asyncio.create_task(self._retire_when_idle())
        return cleared

    async def _retire_when_idle(self) -> None:
        runtime = self.runtime
        if runtime is None or not runtime.running or self.host.participants:
            return
        if runtime.metrics().actors.get(self.name, 0):
            return  # a write arrived after the clear: it starts new context here
        await runtime.retire(self.kind, self.key)

    async def on_stop(self) -> None:
        self.host.stop()


class TopicSectionActor(Agent):
    """One configured context topic for every participant; the topic itself is its mailbox.

    Sensor processes publish ``ConversationContextUpdate`` on the topic with the
    participant in the envelope (dated by the envelope's timestamp); the manager's
    ``update()`` arrives as a ``TopicWrite`` with its own time. A summary topic's
    update replaces that participant's state, an incremental one appends to it.
    """

    def __init__(
        self,
        plan: ContextPlan,
        section: Section,
        *,
        store: ContextStore | None = None,
        host: int = 0,
    ) -> None:
        self.host = SectionHost(
            self, section, plan, plan.topics.topic_result(section.spec.name), store=store, host=host
        )
        self.closed = False
        t, topic = plan.topics, section.spec.name
        self._handlers: dict[Topic, Handler] = {
            t.updates(topic): self.on_update,
            t.topic_write(topic): self.on_write,
            t.topic_result(topic): self.on_result,
            t.topic_clear(topic): self.on_clear,
            t.topic_load(topic): self.on_load,
            t.topic_compact(topic): self.on_compact,
        }

    def handlers(self) -> Handlers:
        """Its topic (sensor updates), plus the manager's writes, loads, compactions,
        compaction results and clears for it."""
        return self._handlers

    def gauges(self) -> dict[str, float]:
        return self.host.gauges()

    def _apply(
        self, participant_id: str | None, text: str, timestamp_us: int, ack: tuple[str, int] | None
    ) -> None:
        if self.closed:
            return
        if participant_id is None:
            get_logger(actor=self.name).warning("context.update_without_participant")
            return
        if ack is not None and self.host.acknowledged(participant_id, *ack):
            return  # re-sent after a restart, and already applied
        section = self.host.section
        if section.spec.kind == "summary":
            change = lambda state: section.replace_state(state, text, timestamp_us=timestamp_us)  # noqa: E731
        else:
            change = lambda state: section.append_update(state, text, timestamp_us=timestamp_us)  # noqa: E731
        self.host.write(participant_id, change, ack)

    async def on_update(self, message: ConversationContextUpdate, ctx: RuntimeContext) -> None:
        self._apply(ctx.participant_id, message.text, ctx.metadata.timestamp_us, None)

    async def on_write(self, message: TopicWrite, ctx: RuntimeContext) -> None:
        self._apply(
            ctx.participant_id, message.text, message.timestamp_us, (message.writer, message.seq)
        )

    async def on_load(self, message: LoadSection, ctx: RuntimeContext) -> None:
        pid = ctx.participant_id
        if self.closed or pid is None or self.host.acknowledged(pid, message.writer, message.seq):
            return
        self.host.load(pid, message.dump, (message.writer, message.seq))

    async def on_compact(self, message: CompactSection, ctx: RuntimeContext) -> None:
        if ctx.participant_id is not None:
            self.host.compact_now(ctx.participant_id, message.writer, message.seq)

    async def on_result(self, message: CompactionDone, ctx: RuntimeContext) -> None:
        if ctx.participant_id is not None:
            self.host.result(ctx.participant_id, message)

    async def on_clear(self, message: ClearSection, ctx: RuntimeContext) -> Cleared:
        if message.close:
            self.closed = True
        return self.host.clear(ctx.participant_id)

    async def on_start(self) -> None:
        self.host.resume()

    async def on_stop(self) -> None:
        self.host.stop()


class ContextHost(Agent):
    """One section host (process, shard): its journal, recovery and full snapshots.

    At start (before the runtime reports ready) it spawns the dialogue actor of every
    participant its journal holds, with the recovered state, and has every section
    re-issue pending compactions and publish its views under this runtime's epoch;
    then it publishes ``HostStarted``. It answers ``HostSync`` asks with the views it
    holds (a replica's resync, or one participant's fetch) or the states as a dump
    (``ContextManager.dump``): a snapshot in pages within the message limit, in
    participant name order, each participant whole in one page.

    A journal written under another shard count holds participants this shard no longer
    owns, and a shard count that went down leaves journals no process opens (``orphans``,
    given to shard 0). Their dialogues are migrated once ready: each is sent to its
    owner (``dialogue_migrate``, merged there by exchange identity) and its rows are
    deleted here only once the owner answered, which it does after journaling it; an
    owner not up yet is asked again every ``MIGRATION_RETRY_S``. An orphan journal left
    empty is removed. ``migrated`` counts them, ``migrating`` what is still to send. A
    clear of a participant still waiting here drops its dialogue instead (the owner
    answers the clear); one whose migration is on its way when the clear comes is
    merged at the owner, before or after the clear.
    """

    def __init__(
        self,
        plan: ContextPlan,
        kind: str,
        index: int,
        topics: list[TopicSectionActor],
        store: ContextStore | None,
        *,
        shards: int = 1,
        orphans: Sequence[ContextStore] = (),
    ) -> None:
        self._plan = plan
        self.kind = kind
        self.index = index
        self.topics = topics
        self.store = store
        self.orphans = list(orphans)
        dialogue = journal_name(plan.config.dialogue)
        self.recovered: dict[str, Recovered] = {}
        """Dialogue states waiting for their actor (spawned at start)."""
        self._foreign: dict[tuple[int, str], tuple[ContextStore, str, Recovered]] = {}
        """Dialogue states of participants another shard owns, to migrate there, by
        (journal, participant)."""
        for journal in [store, *self.orphans] if store is not None else self.orphans:
            for (pid, name), item in journal.recovered.items():
                if name != dialogue:
                    continue
                if journal is store and shard_of(pid, shards) == index:
                    self.recovered[pid] = item
                else:
                    self._foreign[id(journal), pid] = (journal, pid, item)
        self.dialogues_held: set[str] = set(self.recovered) if store is not None else set()
        """With a journal, the participants of this shard whose dialogue has a state,
        whether its actor is live or was retired by the runtime's ``keyed_instances``
        bound (then the journal alone holds it: ``take``, and the snapshots read it)."""
        self._dialogue_reader = SectionHost(
            self, plan.config.dialogue, plan, plan.topics.dialogue_result, host=index
        )
        """Renders a retired dialogue read from the journal (it holds no state)."""
        self.migrated = 0
        """Dialogues migrated to the shard that owns them now."""
        self._migration: asyncio.Task[None] | None = None
        t = plan.topics
        self._handlers: dict[Topic, Handler] = {
            t.host_sync(index): self.on_sync,
            t.host_dump(index): self.on_dump,
            t.dialogue_clear: self.on_clear,
        }

    async def on_clear(self, message: ClearSection, ctx: RuntimeContext) -> object:
        """Drop the waiting dialogue of a cleared participant (all for a global clear);
        never answers: the dialogue actor that owns the participant does."""
        pid = ctx.participant_id
        section = journal_name(self._plan.config.dialogue)
        for key in [key for key in self._foreign if pid is None or key[1] == pid]:
            journal, participant, _ = self._foreign.pop(key)
            journal.delete(participant, section)
        if pid is None and self.store is not None:  # retired dialogues have no actor to ask
            live = {agent.key for agent in self._dialogues()}
            for participant in [p for p in self.dialogues_held if p not in live]:
                self.store.delete(participant, section)
                self.dialogues_held.discard(participant)
        return DEFERRED_REPLY

    async def migration_finished(self) -> None:
        """Return once every foreign dialogue is migrated (at once when there is none)."""
        if self._migration is not None:
            await asyncio.shield(self._migration)

    @property
    def migrating(self) -> int:
        """Dialogues of other shards' participants still to migrate."""
        return len(self._foreign)

    def gauges(self) -> dict[str, float]:
        """Migrations (see the class docstring), and the journal rows that could not be
        read and were quarantined when this host's journals were opened
        (``ContextStore.quarantined``)."""
        journals = [self.store, *self.orphans] if self.store is not None else self.orphans
        return {
            "context.migrated": float(self.migrated),
            "context.migrating": float(self.migrating),
            "context.journal_quarantined": float(sum(j.quarantined for j in journals)),
        }

    def handlers(self) -> Handlers:
        return self._handlers

    def take(self, participant_id: str) -> Recovered | None:
        """The dialogue state of a participant whose actor is being built: recovered at
        start, or, for one whose actor the runtime retired, read from the journal after
        handing it what the retired actor still had scheduled (``ContextStore.flush``)."""
        recovered = self.recovered.pop(participant_id, None)
        if recovered is None and participant_id in self.dialogues_held:
            recovered = self._journaled_dialogue(participant_id)
        return recovered

    def _journaled_dialogue(self, participant_id: str) -> Recovered | None:
        """A held dialogue as the journal has it (None, and no longer held, if it has
        none: cleared meanwhile, or quarantined)."""
        if self.store is None:
            return None
        self.store.flush()
        found = self.store.read_section(participant_id, journal_name(self._plan.config.dialogue))
        if found is None:
            self.dialogues_held.discard(participant_id)
        return found

    def _retired_dialogue_views(self, participant_id: str) -> list[tuple[str, SectionView]]:
        if participant_id not in self.dialogues_held:
            return []
        recovered = self._journaled_dialogue(participant_id)
        if recovered is None:
            return []
        return [(participant_id, self._dialogue_reader.view_of(recovered))]

    def _retired_dialogue_dump(self, participant_id: str) -> SectionDump | None:
        if participant_id not in self.dialogues_held:
            return None
        recovered = self._journaled_dialogue(participant_id)
        if recovered is None:
            return None
        return export_section(self._plan.config.dialogue, recovered.state)

    def _dialogues(self) -> list[DialogueSectionActor]:
        runtime = self.runtime
        if runtime is None:
            return []
        return [
            agent
            for agent in runtime.keyed_instances(self.kind).values()
            if isinstance(agent, DialogueSectionActor)
        ]

    async def on_start(self) -> None:
        runtime = self.runtime
        assert runtime is not None
        log = get_logger(actor=self.name)
        for participant_id in list(self.recovered):
            agent = runtime.spawn(self.kind, participant_id)
            if isinstance(agent, DialogueSectionActor):
                agent.resume()
        participants = {pid for topic in self.topics for pid in topic.host.participants}
        participants.update(agent.key for agent in self._dialogues())
        if self.store is not None:
            log.info("context.recovered", participants=len(participants), path=str(self.store.path))
            await self.store.barrier()
        runtime.send(
            self._plan.topics.host_started,
            HostStarted(self.index, runtime.epoch, len(participants)),
            source=self.name,
        )
        if self._foreign or self.orphans:
            log.info(
                "context.migrating",
                participants=len(self._foreign),
                orphan_journals=[str(orphan.path) for orphan in self.orphans],
            )
            self._migration = asyncio.create_task(
                self._migrate(), name=f"xrmq-context-migrate-{self.index}"
            )

    async def _migrate(self) -> None:
        """Send every foreign dialogue to its owner until each is journaled there
        (``MIGRATION_BATCH`` asks at a time, so owners that are down cost one timeout)."""
        log = get_logger(actor=self.name)
        while self._foreign:
            keys = list(self._foreign)
            for start in range(0, len(keys), MIGRATION_BATCH):
                batch = keys[start : start + MIGRATION_BATCH]
                await asyncio.gather(*(self._migrate_one(key, log) for key in batch))
            if self._foreign:
                log.warning(
                    "context.migration_waiting",
                    participants=len(self._foreign),
                    retry_s=MIGRATION_RETRY_S,
                )
                await asyncio.sleep(MIGRATION_RETRY_S)
        log.info("context.migrated", participants=self.migrated)
        for orphan in self.orphans:
            _remove_if_empty(orphan, log)
        self.orphans = []

    async def _migrate_one(self, key: tuple[int, str], log) -> None:
        item = self._foreign.get(key)
        runtime = self.runtime
        if item is None or runtime is None:
            return  # cleared meanwhile
        journal, pid, recovered = item
        section = self._plan.config.dialogue
        dump = export_section(section, recovered.state)
        try:
            await runtime.ask(
                self._plan.topics.dialogue_migrate,
                LoadSection("", 0, dump),
                reply_type=bool,
                participant_id=pid,
                source=self.name,
                timeout=self._plan.control_timeout_s,
            )
        except (TimeoutError, AskError) as error:
            log.debug("context.migration_waiting", participant=pid, error=repr(error))
            return
        if self._foreign.pop(key, None) is not None:
            journal.delete(pid, journal_name(section))
            self.migrated += 1

    def views(self, participant_id: str | None = None) -> list[tuple[str, SectionView]]:
        """Every view this host holds (of one participant), as (participant, view)."""
        views: list[tuple[str, SectionView]] = []
        live = set()
        for agent in self._dialogues():
            live.add(agent.key)
            if participant_id is None or agent.key == participant_id:
                views.extend(agent.host.views(agent.key))
        retired = self.dialogues_held if participant_id is None else {participant_id}
        for pid in sorted(retired - live):
            views.extend(self._retired_dialogue_views(pid))
        for topic in self.topics:
            views.extend(topic.host.views(participant_id))
        return views

    async def on_sync(self, message: HostSync, ctx: RuntimeContext) -> HostViews:
        """One participant's views, or the page of the snapshot after ``message.after``."""
        if self.store is not None:
            await self.store.barrier()  # a snapshot shows only what is in the journal
        runtime = self.runtime
        epoch = runtime.epoch if runtime is not None else 0
        if message.participant_id is not None:
            return HostViews(self.index, epoch, tuple(self.views(message.participant_id)))
        dialogues = {agent.key: agent for agent in self._dialogues()}

        def views_of(pid: str) -> list[tuple[str, SectionView]]:
            agent = dialogues.get(pid)
            own = agent.host.views(pid) if agent is not None else self._retired_dialogue_views(pid)
            for topic in self.topics:
                own.extend(topic.host.views(pid))
            return own

        views, after = self._page(message, dialogues, views_of)
        return HostViews(self.index, epoch, tuple(views), after)

    async def on_dump(self, message: HostSync, ctx: RuntimeContext) -> HostDump:
        """One participant's section states, or the page of them after ``message.after``."""
        if self.store is not None:
            await self.store.barrier()
        dialogues = {agent.key: agent for agent in self._dialogues()}

        def dump_of(pid: str) -> list[ParticipantDump]:
            agent = dialogues.get(pid)
            exports = [
                agent.host.export(pid) if agent is not None else self._retired_dialogue_dump(pid)
            ]
            exports.extend(topic.host.export(pid) for topic in self.topics)
            sections = tuple(dump for dump in exports if dump is not None)
            return [ParticipantDump(pid, sections)] if sections else []

        if message.participant_id is not None:
            return HostDump(tuple(dump_of(message.participant_id)))
        dumps, after = self._page(message, dialogues, dump_of)
        return HostDump(tuple(dumps), after)

    def _page(
        self,
        message: HostSync,
        dialogues: Mapping[str, object],
        items_of: Callable[[str], list[T]],
    ) -> tuple[list[T], str | None]:
        """The items of the participants after ``message.after`` (in name order) that fit
        in a reply within the message limit (the smaller of this runtime's and
        ``message.page_bytes``), each participant's items whole; at least one
        participant, so one whose items alone exceed the limit fails its reply (an error
        the asker logs) instead of stalling the pages. Also the cursor of the next page
        (the last participant taken), None after the last."""
        runtime = self.runtime
        limit = runtime.max_message_bytes if runtime is not None else message.page_bytes
        if message.page_bytes > 0:
            limit = min(limit, message.page_bytes)
        ids = set(dialogues) | self.dialogues_held
        for topic in self.topics:
            ids.update(topic.host.participant_ids())
        after = message.after
        remaining = sorted(pid for pid in ids if after is None or pid > after)
        items: list[T] = []
        size = PAGE_OVERHEAD_BYTES
        try:
            for index, pid in enumerate(remaining):
                if index % PAGE_PREFETCH == 0:  # retired participants, read in one go
                    for topic in self.topics:
                        topic.host.prefetch(remaining[index : index + PAGE_PREFETCH])
                own = items_of(pid)
                cost = sum(len(_page_encoder.encode(item)) for item in own)
                cursor = len(_page_encoder.encode(pid))
                if items and size + cost + cursor > limit:
                    return items, remaining[index - 1]
                items.extend(own)
                size += cost
            return items, None
        finally:
            for topic in self.topics:
                topic.host.forget_prefetched()

    async def on_stop(self) -> None:
        if self._migration is not None:
            self._migration.cancel()
            await asyncio.gather(self._migration, return_exceptions=True)
        for orphan in self.orphans:
            orphan.close()
        if self.store is not None:
            self.store.close()


T = TypeVar("T")

PAGE_PREFETCH = 512
"""Participants whose retired sections a snapshot page reads from the journal at once."""
PAGE_OVERHEAD_BYTES = 64
"""A page's bytes besides its items and cursor (``HostViews``' host and epoch, framing)."""
_page_encoder = msgspec.msgpack.Encoder()

MIGRATION_RETRY_S = 1.0
"""How often a host asks again an owner that did not take a migrated dialogue yet."""
MIGRATION_BATCH = 64
"""Migration asks in flight at once."""


def _remove_if_empty(store: ContextStore, log) -> None:
    """Close an orphan journal; remove its files once nothing is left in it (the tools
    transcripts it may hold keep it)."""
    empty = store.total_rows() == 0
    store.close()
    if empty:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{store.path}{suffix}").unlink(missing_ok=True)
        log.info("context.orphan_journal_removed", path=str(store.path))


def orphan_journals(directory: str | os.PathLike[str], namespace: str, shards: int) -> list[Path]:
    """The journals ``<namespace>-<i>.sqlite3`` in ``directory`` of shards ``i >= shards``
    (left by a larger shard count), for shard 0 to migrate."""
    found = []
    for path in Path(directory).glob(f"{namespace}-*.sqlite3"):
        suffix = path.name[len(namespace) + 1 : -len(".sqlite3")]
        if suffix.isdigit() and int(suffix) >= shards:
            found.append(path)
    return sorted(found, key=lambda path: int(path.name[len(namespace) + 1 : -len(".sqlite3")]))


def dialogue_kind(name: str) -> str:
    """The keyed kind under which a runtime hosts the dialogue actors of ``name``."""
    return f"{name}.dialogue"


def topic_actor_name(name: str, topic: str) -> str:
    """The registered name of the section actor of ``topic``."""
    return f"{name}.topic.{topic}"


def host_actor_name(name: str, shard: int) -> str:
    """The registered name of the ``ContextHost`` of ``shard``."""
    return f"{name}.host.{shard}"


def register_sections(
    runtime: AgentRuntime,
    plan: ContextPlan,
    *,
    name: str = "context",
    shard: int = 0,
    shards: int = 1,
    topics: Sequence[str] | None = None,
    store: ContextStore | None = None,
    orphans: Sequence[ContextStore] = (),
) -> ContextHost:
    """Host section actors in ``runtime`` (before it starts); return its ``ContextHost``.

    Registers the keyed dialogue kind ``<name>.dialogue`` for the participants whose
    stable hash falls in ``shard`` of ``shards``, and one actor ``<name>.topic.<topic>``
    per configured topic (``topics`` selects some, for spreading topics over processes;
    host each topic in exactly one process), and the host ``<name>.host.<shard>``
    (section host ``shard`` of ``plan.section_hosts``). With ``store`` (an opened
    journal, ``store.open_store``) every change is journaled and the journal's
    states are restored at start; dialogues of participants another shard owns (the
    shard count changed), and every dialogue in ``orphans`` (journals of shards that no
    longer exist, opened), are migrated to their owners (``ContextHost``).
    """
    names = [section.spec.name for section in plan.config.topics]
    chosen = names if topics is None else list(topics)
    unknown = [topic for topic in chosen if topic not in names]
    if unknown:
        raise ValueError(f"topics: not configured topics: {unknown}")
    if not 0 <= shard < plan.section_hosts:
        raise ValueError(
            f"shard: section host {shard} is outside the plan's {plan.section_hosts} section hosts"
        )
    t = plan.topics
    kind = dialogue_kind(name)
    actors = [
        TopicSectionActor(plan, section, store=store, host=shard)
        for section in plan.config.topics
        if section.spec.name in chosen
    ]
    host = ContextHost(plan, kind, shard, actors, store, shards=shards, orphans=orphans)
    if store is not None:
        by_name = {actor.host.journal_name: actor for actor in actors}
        for (pid, section_name), recovered in store.recovered.items():
            actor = by_name.get(section_name)
            if actor is not None:
                actor.host.restore(pid, recovered)
        for actor in actors:
            actor.host.adopt_journal()
    runtime.register_keyed(
        kind,
        DialogueSectionActor,
        factory=lambda key: DialogueSectionActor(
            key, plan, kind, store=store, host=shard, recovered=host.take(key), context_host=host
        ),
        shard=shard,
        shards=shards,
        handlers={
            t.dialogue_write: DialogueSectionActor.on_write,
            t.dialogue_result: DialogueSectionActor.on_result,
            t.dialogue_clear: DialogueSectionActor.on_clear,
            t.dialogue_load: DialogueSectionActor.on_load,
            t.dialogue_migrate: DialogueSectionActor.on_migrate,
            t.dialogue_compact: DialogueSectionActor.on_compact,
        },
    )
    for actor in actors:
        runtime.register(topic_actor_name(name, actor.host.section.spec.name), actor)
    runtime.register(host_actor_name(name, shard), host)
    return host


def _guarded(state: SectionState) -> tuple[int, int, int]:
    """The state's guard counters: summaries refused as frozen, as lossy, and fallbacks."""
    return (state.frozen_summaries, state.lossy_summaries, state.fallbacks)
