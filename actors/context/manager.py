"""``ContextManager``: the SDK's facade over the context actors.

The manager writes to section actors over the bus and keeps a local replica of their
views, so ``blocks()`` is synchronous and local and never sees a half-applied change.
``record_exchange``/``reconcile_history`` are synchronous and read-your-writes: the
manager decides with the engine's own rules what is new, renders it into its replica at
once, and drops that overlay when the dialogue section's view acknowledges the write.
``update`` returns once its topic's section acknowledged it. No method waits for a model.

Deployment:

- ``local`` (default): ``runtime.register("context", context.subscriber())`` also
  registers the section actors and the compaction workers in that runtime (the
  subscriber attaches the manager when the runtime registers it). A manager used before
  any subscriber was registered (e.g. one without topics, which has no subscriber)
  hosts the same actors on a private runtime of its own (on an embedded bus), closed by ``close()``.
- ``split``: the subscriber is only the replica; other processes host the sections
  (``register_sections``) and the workers (``register_workers``) from the same
  ``ContextPlan`` (``context_plan`` with the same keyword arguments).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Literal
from uuid import uuid4

from xrmq.actors.clock import now_us
from xrmq.actors.models import LLMService
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeClosedError, RuntimeContext, get_logger
from xrmq.actors.runtime.agent import Handlers
from xrmq.schemas import CompactionPrompts, ContextBlock, ConversationContextUpdate
from xrmq.schemas._validation import check_name
from xrmq.topics import Topic

from .config import (
    DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
    DEFAULT_DIALOGUE_BUDGET_BYTES,
    DEFAULT_TOPIC_BUDGET_BYTES,
)
from .engine import exchange_identity, history_tail
from .messages import (
    CancelJobs,
    Cleared,
    ClearSection,
    ExchangeRecord,
    ForgetParticipant,
    RecordExchanges,
    SectionView,
    TopicWrite,
)
from .plan import (
    DEFAULT_COMPACTION_TIMEOUT_S,
    DEFAULT_COMPACTION_WORKERS,
    DEFAULT_CONTROL_TIMEOUT_S,
    DEFAULT_NAMESPACE,
    DEFAULT_WORKER_CONCURRENCY,
    ContextPlan,
    context_plan,
)
from .render import check_timestamp, exchange_text
from .replica import ParticipantReplica
from .sections import register_sections
from .workers import register_workers

Deployment = Literal["local", "split"]
"""Where the section actors and compaction workers run: ``local``, in the runtime that
registers the subscriber; ``split``, in other processes (see the module docstring)."""


def _check_participant(participant_id: object) -> str:
    return check_name(participant_id, "participant_id")


class ContextSubscriber(Agent):
    """The agent ``subscriber()`` returns: the manager's replica of the section views.

    Registering it attaches the manager to that runtime (and, local, registers the
    section actors and compaction workers there too): the runtime assigns
    ``agent.runtime`` during ``register``, before it starts.
    """

    def __init__(self, manager: "ContextManager") -> None:
        self._manager = manager
        self._runtime: AgentRuntime | None = None

    @property
    def runtime(self) -> AgentRuntime | None:  # type: ignore[override]
        return self._runtime

    @runtime.setter
    def runtime(self, runtime: AgentRuntime | None) -> None:
        if runtime is not None and runtime is not self._runtime:
            self._manager._attach(runtime, self.name or self._manager.plan.namespace)
        self._runtime = runtime

    def handlers(self) -> Handlers:
        """The section views every replica follows, and this manager's own forget barrier."""
        topics = self._manager.plan.topics
        return {topics.view: self.on_view, topics.replica(self._manager.id): self.on_forget}

    async def on_view(self, message: SectionView, ctx: RuntimeContext) -> None:
        if ctx.participant_id is not None:
            self._manager._on_view(ctx.participant_id, message)

    async def on_forget(self, message: ForgetParticipant, ctx: RuntimeContext) -> bool:
        if ctx.participant_id is not None:
            self._manager._on_forget(ctx.participant_id, message.generations)
        return True

    async def on_start(self) -> None:
        self._manager._on_ready()

    async def on_stop(self) -> None:
        self._manager._on_stopped()


class ContextManager:
    """Retain participant-scoped context and render it into prompts for any number of agents.

    The SDK's constructor (same names and defaults, docs/context.md), plus xrmq's deployment options:
    ``deployment`` (``"local"`` or ``"split"``), ``namespace`` of the internal topics,
    the worker pool (``compaction_workers``, ``worker_concurrency``), the job timeout
    after which a job goes to another worker (``compaction_timeout_s``) and the bound on
    each clear/cancel round trip (``control_timeout_s``). All budgets must be positive;
    topic lists hold non-empty names, unique within and across both lists; a per-topic
    budget mapping covers every configured topic; the compaction input budget is at
    least half the largest section budget plus 256 bytes.
    """

    def __init__(
        self,
        llm: LLMService,
        *,
        summary_context_topics: Sequence[str] = (),
        incremental_context_topics: Sequence[str] = (),
        dialogue_budget_bytes: int = DEFAULT_DIALOGUE_BUDGET_BYTES,
        topic_budget_bytes: int | Mapping[str, int] = DEFAULT_TOPIC_BUDGET_BYTES,
        compaction_input_budget_bytes: int = DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
        compaction_prompts: CompactionPrompts | None = None,
        deployment: Deployment = "local",
        namespace: str = DEFAULT_NAMESPACE,
        compaction_workers: int = DEFAULT_COMPACTION_WORKERS,
        worker_concurrency: int = DEFAULT_WORKER_CONCURRENCY,
        compaction_timeout_s: float = DEFAULT_COMPACTION_TIMEOUT_S,
        control_timeout_s: float = DEFAULT_CONTROL_TIMEOUT_S,
    ) -> None:
        if deployment not in ("local", "split"):
            raise ValueError(f"deployment: must be 'local' or 'split', got {deployment!r}")
        self.plan: ContextPlan = context_plan(
            summary_context_topics=summary_context_topics,
            incremental_context_topics=incremental_context_topics,
            dialogue_budget_bytes=dialogue_budget_bytes,
            topic_budget_bytes=topic_budget_bytes,
            compaction_input_budget_bytes=compaction_input_budget_bytes,
            compaction_prompts=compaction_prompts,
            namespace=namespace,
            compaction_workers=compaction_workers,
            worker_concurrency=worker_concurrency,
            compaction_timeout_s=compaction_timeout_s,
            control_timeout_s=control_timeout_s,
        )
        self.llm = llm
        self.deployment = deployment
        self.id = uuid4().hex[:12]
        self._log = get_logger(actor=f"{namespace}.manager")
        self._replicas: dict[str, ParticipantReplica] = {}
        self._runtime: AgentRuntime | None = None
        self._name = namespace
        self._private: AgentRuntime | None = None
        self._private_start: asyncio.Task[None] | None = None
        self._outbox: list[tuple[Topic, Any, str]] = []
        self._seq = itertools.count(1)
        self._waiters: dict[int, tuple[str, str, asyncio.Future[None]]] = {}
        self._change: asyncio.Future[None] | None = None
        self._closed = False
        self._closing: asyncio.Task[None] | None = None

    # --- attachment --------------------------------------------------------------------

    def subscriber(self) -> Agent:
        """Return an Agent that applies the configured context topics to this manager.

        Register it with the same AgentRuntime that delivers the updates, before the
        runtime starts. Local, it brings the section actors and compaction workers
        into that runtime. Requires at least one configured topic.
        """
        if not self.plan.config.topics:
            raise ValueError(
                "subscriber: configure at least one topic (summary_context_topics or "
                "incremental_context_topics) before calling this method"
            )
        return self._new_subscriber()

    def _new_subscriber(self) -> ContextSubscriber:
        return ContextSubscriber(self)

    def _attach(self, runtime: AgentRuntime, name: str) -> None:
        if self._runtime is not None:
            raise RuntimeError(f"subscriber: this ContextManager is already attached to runtime {self._runtime.name!r}")
        self._runtime, self._name = runtime, name
        if self.deployment == "local":
            register_sections(runtime, self.plan, name=name)
            register_workers(runtime, self.plan, self.llm, name=name)

    def _on_ready(self) -> None:
        runtime, outbox, self._outbox = self._runtime, self._outbox, []
        for topic, message, participant_id in outbox:
            runtime.send(topic, message, participant_id=participant_id, source=self._name)

    def _on_stopped(self) -> None:
        for _, _, future in self._waiters.values():
            if not future.done():
                future.set_exception(RuntimeClosedError("update: the context runtime stopped"))

    def _start_private(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "ContextManager: register subscriber() with a runtime, or write from a running event loop "
                "(the manager then hosts its actors on a private runtime)"
            ) from None
        runtime = AgentRuntime(name=f"{self.plan.namespace}-{self.id}")
        runtime.register(self.plan.namespace, self._new_subscriber())
        self._private = runtime
        self._private_start = loop.create_task(runtime.start(), name=f"xrmq-context-{self.id}-start")

    def _send(self, topic: Topic, message: Any, participant_id: str) -> bool:
        """Send now if the runtime runs (True), else queue until it starts (False)."""
        runtime = self._runtime
        if runtime is not None and runtime.running:
            runtime.send(topic, message, participant_id=participant_id, source=self._name)
            return True
        if runtime is None:
            self._start_private()
        self._outbox.append((topic, message, participant_id))
        return False

    # --- replica -------------------------------------------------------------------------

    def _on_view(self, participant_id: str, view: SectionView) -> None:
        if self._closed:
            return
        replica = self._replicas.get(participant_id)
        if replica is None:
            replica = self._replicas[participant_id] = ParticipantReplica()
        replica.apply_view(view, self.id)
        if view.writer == self.id and not view.dialogue:
            self._release(lambda section, pid, seq: pid == participant_id and section == view.section
                          and seq <= view.seq)
        self._changed()

    def _on_forget(self, participant_id: str, generations: tuple[str, ...]) -> None:
        replica = self._replicas.get(participant_id)
        if replica is not None:
            replica.forget(generations)
            if replica.empty:
                del self._replicas[participant_id]
        self._release(lambda section, pid, seq: pid == participant_id)
        self._changed()

    def _release(self, match) -> None:
        for seq, (section, pid, future) in list(self._waiters.items()):
            if match(section, pid, seq):
                del self._waiters[seq]
                if not future.done():
                    future.set_result(None)

    def _changed(self) -> None:
        if self._change is not None and not self._change.done():
            self._change.set_result(None)

    async def changed(self) -> None:
        """Wait until the local replica next changes (a view arrived, a write or clear).

        Lets an agent react to new context instead of polling ``blocks()``.
        """
        if self._change is None or self._change.done():
            self._change = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._change)

    async def synced(self) -> None:
        """Wait until every write made through this manager is in its section's view."""
        while self._waiters or any(replica.pending for replica in self._replicas.values()):
            await self.changed()

    def _replica(self, participant_id: str) -> ParticipantReplica:
        replica = self._replicas.get(participant_id)
        if replica is None:
            replica = self._replicas[participant_id] = ParticipantReplica()
        return replica

    # --- the SDK's methods ----------------------------------------------------------------

    def blocks(self, participant_id: str) -> tuple[ContextBlock, ...]:
        """Render a participant's dialogue and topic context: summaries first, then newer
        entries in time order. Synchronous, from the local replica."""
        replica = self._replicas.get(_check_participant(participant_id))
        return () if replica is None else replica.blocks(self.plan.config)

    def record_exchange(self, participant_id: str, request: str, answer: str, *, timestamp_us: int,
                        exchange_id: object | None) -> None:
        """Add one completed exchange to a participant's dialogue; dropped once closed.

        The next ``blocks()`` contains it. An exchange whose identity (its id, else its
        request, answer and time) is known for the session is not added again.
        """
        _check_participant(participant_id)
        if not isinstance(request, str) or not isinstance(answer, str):
            raise ValueError("record_exchange: request and answer must be str")
        check_timestamp(timestamp_us)
        if self._closed:
            return
        identity = exchange_identity(request, answer, timestamp_us, exchange_id)
        replica = self._replica(participant_id)
        if identity in replica.identities:
            return
        self._write_exchanges(participant_id, replica, [(identity, request, answer, timestamp_us)])

    def reconcile_history(self, participant_id: str, exchanges: Sequence[tuple[str, str, int | None]], *,
                          exchange_ids: Sequence[object | None]) -> None:
        """Merge a front-end window of completed exchanges without replaying known ones.

        Only the contiguous tail after the window's last known exchange is added; an
        exchange without a time is recorded now. Dropped once closed.
        """
        _check_participant(participant_id)
        replica = self._replicas.get(participant_id)
        known = replica.identities if replica is not None else frozenset()
        tail = history_tail(known, exchanges, exchange_ids=exchange_ids, now_us=now_us())
        if self._closed or not tail:
            return
        self._write_exchanges(participant_id, self._replica(participant_id), tail)

    def _write_exchanges(self, participant_id: str, replica: ParticipantReplica,
                         exchanges: list[tuple[bytes, str, str, int]]) -> None:
        seq = next(self._seq)
        records = tuple(ExchangeRecord(identity, request, answer, when) for identity, request, answer, when in exchanges)
        for record in records:
            replica.identities.add(record.identity)
            replica.pending.append((seq, ContextBlock(record.timestamp_us,
                                                      exchange_text(record.request, record.answer, record.timestamp_us))))
        self._send(self.plan.topics.dialogue_write, RecordExchanges(self.id, seq, records), participant_id)
        self._changed()

    async def update(self, participant_id: str, source: str, update: ConversationContextUpdate, *,
                     mode: Literal["summary", "incremental"], timestamp_us: int | None = None) -> None:
        """Apply one configured topic update to a participant's context.

        Returns once the topic's section applied it (the next ``blocks()`` shows it);
        dropped once closed. Raises ``ValueError`` if ``source`` is not a configured
        topic or ``mode`` is not its configured mode, ``TimeoutError`` if the section
        does not answer within ``control_timeout_s`` while the runtime runs.
        """
        self.plan.config.topic_section(source, mode)
        if not isinstance(update, ConversationContextUpdate):
            raise ValueError("update: must be a ConversationContextUpdate")
        _check_participant(participant_id)
        when = now_us() if timestamp_us is None else check_timestamp(timestamp_us)
        if self._closed:
            return
        seq = next(self._seq)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[seq] = (source, participant_id, future)
        try:
            if self._send(self.plan.topics.topic_write(source), TopicWrite(self.id, seq, update.text, when),
                          participant_id):
                try:
                    await asyncio.wait_for(asyncio.shield(future), self.plan.control_timeout_s)
                except TimeoutError:
                    raise TimeoutError(
                        f"update: the section of topic {source!r} did not apply it within "
                        f"{self.plan.control_timeout_s}s"
                    ) from None
            else:
                await future
        finally:
            self._waiters.pop(seq, None)

    async def clear(self, participant_id: str) -> None:
        """Forget a participant's context after cancelling its compaction jobs.

        Returns once every section forgot it, its jobs' model streams are closed and the
        replica dropped it. Idempotent; other participants are unaffected; later writes
        for the participant start new context.
        """
        _check_participant(participant_id)
        replica = self._replicas.get(participant_id)
        if replica is not None:
            replica.pending.clear()
            replica.identities.clear()
        runtime = self._runtime
        if runtime is None or not runtime.running:
            self._outbox = [item for item in self._outbox if item[2] != participant_id]
            self._on_forget(participant_id, ())
            self._replicas.pop(participant_id, None)
            return
        errors = await self._clear_remote(runtime, [participant_id], close=False)
        if errors:
            raise errors[0]

    async def close(self) -> None:
        """Drop later topic updates, exchanges and history, and forget all context after
        cancelling compaction jobs. Idempotent. Close it before the shared model client."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        self._closed = True
        if self._private_start is not None:
            await asyncio.gather(self._private_start, return_exceptions=True)
        runtime = self._runtime
        if runtime is not None and runtime.running:
            for error in await self._clear_remote(runtime, list(self._replicas), close=self.deployment == "local"):
                self._log.warning("context.close_incomplete", error=repr(error))
        self._replicas.clear()
        self._outbox.clear()
        self._release(lambda section, pid, seq: True)
        self._changed()
        if self._private is not None:
            await self._private.stop()

    async def _clear_remote(self, runtime: AgentRuntime, participants: list[str], *, close: bool) -> list[BaseException]:
        """Clear sections, cancel and await the jobs they held, then drop the replica's views.

        Returns the failures of sections that did not answer (their state may remain).
        """
        topics, timeout = self.plan.topics, self.plan.control_timeout_s
        asks: list[tuple[str | None, Any]] = []
        for participant_id in participants:
            asks.append((participant_id, runtime.ask(topics.dialogue_clear, ClearSection(), reply_type=Cleared,
                                                     participant_id=participant_id, source=self._name, timeout=timeout)))
            if not close:
                for section in self.plan.config.topics:
                    asks.append((participant_id, runtime.ask(
                        topics.topic_clear(section.spec.name), ClearSection(), reply_type=Cleared,
                        participant_id=participant_id, source=self._name, timeout=timeout)))
        if close:
            for section in self.plan.config.topics:
                asks.append((None, runtime.ask(topics.topic_clear(section.spec.name), ClearSection(close=True),
                                               reply_type=Cleared, source=self._name, timeout=timeout)))
        replies = await asyncio.gather(*(ask for _, ask in asks), return_exceptions=True)
        errors = [reply for reply in replies if isinstance(reply, BaseException)]
        generations: dict[str, list[str]] = {participant_id: [] for participant_id in participants}
        by_worker: dict[int, list] = {}
        for (participant_id, _), reply in zip(asks, replies):
            if isinstance(reply, BaseException):
                continue
            if participant_id is not None:
                generations[participant_id].extend(reply.generations)
            for job in reply.jobs:
                for worker in job.workers:
                    by_worker.setdefault(worker, []).append(job.job)
        cancels = [runtime.ask(topics.worker_cancel(worker), CancelJobs(tuple(jobs)), reply_type=int,
                               source=self._name, timeout=timeout) for worker, jobs in sorted(by_worker.items())]
        for worker, outcome in zip(sorted(by_worker), await asyncio.gather(*cancels, return_exceptions=True)):
            if isinstance(outcome, BaseException):  # a dead worker runs nothing
                self._log.warning("context.cancel_unanswered", worker=worker, error=repr(outcome))
        forgets = [runtime.ask(topics.replica(self.id), ForgetParticipant(tuple(gens)), reply_type=bool,
                               participant_id=participant_id, source=self._name, timeout=timeout)
                   for participant_id, gens in generations.items()]
        for outcome in await asyncio.gather(*forgets, return_exceptions=True):
            if isinstance(outcome, BaseException):
                errors.append(outcome)
        return errors
