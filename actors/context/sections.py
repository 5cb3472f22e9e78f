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
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable, Sequence
from uuid import uuid4

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, get_logger
from xrmq.actors.runtime.agent import Handler, Handlers
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import Topic

from .compaction import CompactionRequest, CompactionResult, JobRef
from .engine import ApplyStatus, Section, SectionState
from .messages import (
    CancelJobs,
    Cleared,
    ClearSection,
    CompactionDone,
    CompactionJob,
    JobAt,
    RecordExchanges,
    SectionView,
    TopicWrite,
)
from .plan import ContextPlan


class _Job:
    """The pending job of one participant's section: where it went and its timer."""

    __slots__ = ("job", "workers", "timer")

    def __init__(self, job: JobRef, worker: int, timer: asyncio.TimerHandle) -> None:
        self.job = job
        self.workers = [worker]
        self.timer = timer


class _Participant:
    __slots__ = ("state", "job", "ack", "published", "warned")

    def __init__(self, state: SectionState) -> None:
        self.state = state
        self.job: _Job | None = None
        self.ack: tuple[str, int] = ("", 0)
        self.published: tuple[int, tuple[str, int]] | None = None
        self.warned = -1


class SectionHost:
    """One configured section's states for the participants an actor holds."""

    def __init__(self, agent: Agent, section: Section, plan: ContextPlan, result_topic: Topic) -> None:
        self._agent = agent
        self.section = section
        self._plan = plan
        self._result_topic = result_topic
        self._dialogue = section.spec.kind == "dialogue"
        self.participants: dict[str, _Participant] = {}
        self._dirty: set[str] = set()
        self._flush_handle: asyncio.Handle | None = None
        self.compactions = 0
        """Compaction results applied (a summary replaced entries), for ``xrmq top``."""

    def gauges(self) -> dict[str, float]:
        """Compactions applied so far and the jobs still out (the backlog)."""
        backlog = sum(record.job is not None for record in self.participants.values())
        return {"context.compactions": self.compactions, "context.compaction_backlog": backlog}

    @property
    def _runtime(self) -> AgentRuntime | None:
        runtime = self._agent.runtime
        return runtime if runtime is not None and runtime.running else None

    def _log(self, participant_id: str):
        return get_logger(actor=self._agent.name, participant=participant_id, section=self.section.spec.name)

    # --- changes --------------------------------------------------------------------

    def write(self, participant_id: str, change: Callable[[SectionState], object],
              ack: tuple[str, int] | None = None) -> None:
        """Apply ``change`` to the participant's state (created empty on first write)."""
        record = self.participants.get(participant_id)
        if record is None:
            record = self.participants[participant_id] = _Participant(self.section.new_state(uuid4().hex))
        change(record.state)
        if ack is not None:
            record.ack = ack
        self._advance(participant_id, record)

    def result(self, participant_id: str, done: CompactionDone) -> None:
        """Apply a worker's result; a result for a forgotten state is dropped."""
        record = self.participants.get(participant_id)
        if record is None:
            self._log(participant_id).debug("compaction.stale", job=done.result.job.job_id, reason="cleared")
            return
        job = record.job
        status = self.section.apply_result(record.state, done.result)
        if status in (ApplyStatus.APPLIED, ApplyStatus.CLIPPED):
            self.compactions += 1
        if status is not ApplyStatus.STALE and job is not None and job.job == done.result.job:
            job.timer.cancel()
            record.job = None
            for worker in job.workers:
                if worker != done.worker:  # a retried copy still running elsewhere
                    self._send(self._plan.topics.worker_cancel(worker), CancelJobs((job.job,)), participant_id)
        self._log_status(participant_id, status, done.result)
        self._advance(participant_id, record)

    def clear(self, participant_id: str | None) -> Cleared:
        """Forget one participant (every participant for None); return what was forgotten."""
        ids = list(self.participants) if participant_id is None else [participant_id]
        generations: list[str] = []
        jobs: list[JobAt] = []
        for pid in ids:
            record = self.participants.pop(pid, None)
            self._dirty.discard(pid)
            if record is None:
                continue
            generations.append(record.state.generation)
            if record.job is not None:
                record.job.timer.cancel()
                jobs.append(JobAt(record.job.job, pid, tuple(record.job.workers)))
        return Cleared(tuple(generations), tuple(jobs))

    def stop(self) -> None:
        """Cancel timers and pending publication (the actor is stopping)."""
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

    def _dispatch(self, participant_id: str, record: _Participant, request: CompactionRequest) -> None:
        workers = self._plan.compaction_workers
        seed = zlib.crc32(f"{self.section.spec.name}\x00{participant_id}".encode())
        worker = (seed + request.job.job_id) % workers
        timer = asyncio.get_running_loop().call_later(
            self._plan.compaction_timeout_s, self._timed_out, participant_id, request.job
        )
        record.job = _Job(request.job, worker, timer)
        self._send_job(participant_id, request, worker, attempt=0)

    def _send_job(self, participant_id: str, request: CompactionRequest, worker: int, attempt: int) -> None:
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
            log.warning("compaction.retry", job=job.job_id, timed_out_worker=tried[-1], worker=worker)
            tried.append(worker)
            record.job.timer = asyncio.get_running_loop().call_later(
                self._plan.compaction_timeout_s, self._timed_out, participant_id, job
            )
            self._send_job(participant_id, pending.request, worker, attempt=len(tried) - 1)
            return
        log.warning("compaction.gave_up", job=job.job_id, workers=list(tried))
        record.job = None
        result = CompactionResult(job, error=f"timeout after {self._plan.compaction_timeout_s}s at workers {tried}")
        self._log_status(participant_id, self.section.apply_result(record.state, result), result)
        self._advance(participant_id, record)

    def _log_status(self, participant_id: str, status: ApplyStatus, result: CompactionResult) -> None:
        log = self._log(participant_id)
        if status is ApplyStatus.FAILED:
            log.warning("compaction.failed", job=result.job.job_id, error=result.error,
                        finish_reason=result.finish_reason, empty=not result.text.strip())
        elif status is ApplyStatus.CLIPPED:
            log.warning("compaction.clipped", job=result.job.job_id)
        elif status is ApplyStatus.STALE:
            log.info("compaction.stale", job=result.job.job_id)
        else:
            log.debug(f"compaction.{status.value}", job=result.job.job_id)

    # --- views ------------------------------------------------------------------------

    def _mark_dirty(self, participant_id: str) -> None:
        self._dirty.add(participant_id)
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        dirty, self._dirty = self._dirty, set()
        for participant_id in dirty:
            record = self.participants.get(participant_id)
            if record is None:
                continue
            state = record.state
            key = (state.revision, record.ack)
            if key == record.published:
                continue
            rendered = self.section.render(state)
            if rendered.warning is not None and record.warned != state.revision:
                record.warned = state.revision
                self._log(participant_id).warning("context.over_budget", message=rendered.warning.message())
            view = SectionView(self.section.spec.name, self._dialogue, state.generation, state.revision,
                               rendered.blocks, *record.ack)
            self._send(self._plan.topics.view, view, participant_id)
            record.published = key

    def _send(self, topic: Topic, message: object, participant_id: str) -> None:
        runtime = self._runtime
        if runtime is not None:
            runtime.send(topic, message, participant_id=participant_id, source=self._agent.name)


class DialogueSectionActor(Agent):
    """The dialogue section of one participant (a keyed actor, spawned on first message).

    After a clear it holds nothing, and it retires itself once its mailbox is idle, so
    a departed participant leaves no actor behind.
    """

    def __init__(self, participant_id: str, plan: ContextPlan, kind: str) -> None:
        self.key = participant_id
        self.kind = kind
        self.host = SectionHost(self, plan.config.dialogue, plan, plan.topics.dialogue_result)
        self._retiring: asyncio.Task[None] | None = None
        """The retirement after a clear: held, since the loop keeps only weak references to tasks."""

    def gauges(self) -> dict[str, float]:
        return {**self.host.gauges(), "context.participants": len(self.host.participants)}

    async def on_write(self, message: RecordExchanges, ctx: RuntimeContext) -> None:
        section = self.host.section

        def add(state: SectionState) -> None:
            for record in message.exchanges:
                section.add_exchange(state, record.identity, record.request, record.answer,
                                     timestamp_us=record.timestamp_us)

        self.host.write(self.key, add, ack=(message.writer, message.seq))

    async def on_result(self, message: CompactionDone, ctx: RuntimeContext) -> None:
        self.host.result(self.key, message)

    async def on_clear(self, message: ClearSection, ctx: RuntimeContext) -> Cleared:
        cleared = self.host.clear(self.key)
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

    def __init__(self, plan: ContextPlan, section: Section) -> None:
        self.host = SectionHost(self, section, plan, plan.topics.topic_result(section.spec.name))
        self.closed = False
        t, topic = plan.topics, section.spec.name
        self._handlers: dict[Topic, Handler] = {t.updates(topic): self.on_update, t.topic_write(topic): self.on_write,
                          t.topic_result(topic): self.on_result, t.topic_clear(topic): self.on_clear}

    def handlers(self) -> Handlers:
        """Its topic (sensor updates), plus the manager's writes, compaction results and clears for it."""
        return self._handlers

    def gauges(self) -> dict[str, float]:
        return self.host.gauges()

    def _apply(self, participant_id: str | None, text: str, timestamp_us: int,
               ack: tuple[str, int] | None) -> None:
        if self.closed:
            return
        if participant_id is None:
            get_logger(actor=self.name).warning("context.update_without_participant")
            return
        section = self.host.section
        if section.spec.kind == "summary":
            change = lambda state: section.replace_state(state, text, timestamp_us=timestamp_us)  # noqa: E731
        else:
            change = lambda state: section.append_update(state, text, timestamp_us=timestamp_us)  # noqa: E731
        self.host.write(participant_id, change, ack)

    async def on_update(self, message: ConversationContextUpdate, ctx: RuntimeContext) -> None:
        self._apply(ctx.participant_id, message.text, ctx.metadata.timestamp_us, None)

    async def on_write(self, message: TopicWrite, ctx: RuntimeContext) -> None:
        self._apply(ctx.participant_id, message.text, message.timestamp_us, (message.writer, message.seq))

    async def on_result(self, message: CompactionDone, ctx: RuntimeContext) -> None:
        if ctx.participant_id is not None:
            self.host.result(ctx.participant_id, message)

    async def on_clear(self, message: ClearSection, ctx: RuntimeContext) -> Cleared:
        if message.close:
            self.closed = True
        return self.host.clear(ctx.participant_id)

    async def on_stop(self) -> None:
        self.host.stop()


def dialogue_kind(name: str) -> str:
    """The keyed kind under which a runtime hosts the dialogue actors of ``name``."""
    return f"{name}.dialogue"


def topic_actor_name(name: str, topic: str) -> str:
    """The registered name of the section actor of ``topic``."""
    return f"{name}.topic.{topic}"


def register_sections(runtime: AgentRuntime, plan: ContextPlan, *, name: str = "context", shard: int = 0,
                      shards: int = 1, topics: Sequence[str] | None = None) -> None:
    """Host section actors in ``runtime`` (before it starts).

    Registers the keyed dialogue kind ``<name>.dialogue`` for the participants whose
    stable hash falls in ``shard`` of ``shards``, and one actor ``<name>.topic.<topic>``
    per configured topic (``topics`` selects some, for spreading topics over processes;
    host each topic in exactly one process).
    """
    names = [section.spec.name for section in plan.config.topics]
    chosen = names if topics is None else list(topics)
    unknown = [topic for topic in chosen if topic not in names]
    if unknown:
        raise ValueError(f"topics: not configured topics: {unknown}")
    t = plan.topics
    kind = dialogue_kind(name)
    runtime.register_keyed(
        kind, DialogueSectionActor, factory=lambda key: DialogueSectionActor(key, plan, kind),
        shard=shard, shards=shards,
        handlers={t.dialogue_write: DialogueSectionActor.on_write,
                  t.dialogue_result: DialogueSectionActor.on_result,
                  t.dialogue_clear: DialogueSectionActor.on_clear},
    )
    for section in plan.config.topics:
        if section.spec.name in chosen:
            runtime.register(topic_actor_name(name, section.spec.name), TopicSectionActor(plan, section))
