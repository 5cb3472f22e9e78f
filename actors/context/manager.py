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
  hosts the same actors on a private runtime of its own (an embedded bus), closed by
  ``close()``.
- ``split``: the subscriber is only the replica; other processes host the sections
  (``register_sections``) and the workers (``register_workers``) from the same
  ``ContextPlan`` (``context_plan`` with the same keyword arguments).

Durability (``store=PATH`` local; ``[context] state_dir``/``persist`` for an edge
box): a write a section acknowledged (an ``update`` that returned, an exchange that
``synced()`` waited for) is in the section host's journal. ``clear`` removes the
participant's rows before it returns; ``close`` removes every row of this manager.

Restarts: every view carries its section host's index and epoch. A replica that sees a
host's new epoch (its views or its ``HostStarted``) resyncs that host from a full
snapshot (``HostSync``), drops the views the host no longer has, and re-sends its writes
the host has not acknowledged (applied once: exchanges by identity, other writes by
their sequence number). ``resyncing`` tells whether such a resync is under way, and
``synced()`` waits for it. A split manager builds its replica from every host's
snapshot when its runtime starts, so a restarted conversation process keeps every
participant's context in its prompts. A snapshot comes in pages within the bus's
message limit (``HostSync.after``: a host holds more than one message carries), each
participant's views whole in one page; a host restarted between pages is read again
from its first page.

Scale: the replica holds at most ``max_participants``. Once it evicted one, a
participant it does not hold whole may have context at the hosts: ``ensure`` fetches
that participant's views (one ``HostSync`` of the participant per host) before its
context is rendered.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Literal
from uuid import uuid4

from xrmq.actors.clock import now_us
from xrmq.actors.models import LLMService
from xrmq.actors.runtime import (
    Agent,
    AgentRuntime,
    Handlers,
    RuntimeClosedError,
    RuntimeContext,
    get_logger,
    superseding,
)
from xrmq.actors.runtime.ratelimit import AggregatedWarnings
from xrmq.schemas import CompactionPrompts, ContextBlock, ConversationContextUpdate
from xrmq.schemas._validation import check_name
from xrmq.topics import Topic

from .clearing import clear_remote
from .config import (
    DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
    DEFAULT_DIALOGUE_BUDGET_BYTES,
    DEFAULT_MAX_RESIDENT_PARTICIPANTS,
    DEFAULT_RETIRE_IDLE_S,
    DEFAULT_TOPIC_BUDGET_BYTES,
)
from .context_host import ContextHost
from .dump import ContextDump, ParticipantDump, decode_dump, encode_dump
from .engine import exchange_identity, history_tail
from .journal import ContextStore, journal_name
from .manual import CompactOutcome, CompactStatus, SectionOutcome
from .messages import (
    CompactReport,
    CompactSection,
    ExchangeRecord,
    ForgetParticipant,
    HostDump,
    HostStarted,
    HostSync,
    HostViews,
    LoadSection,
    RecordExchanges,
    SectionView,
    TopicWrite,
    view_ack,
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
from .store import OnCorrupt, open_store
from .workers import register_workers

Deployment = Literal["local", "split"]

DEFAULT_MAX_PARTICIPANTS = 4096
"""Participants a manager's replica holds (``max_participants``)."""

DIALOGUE_KEY = "\x00"
"""The dialogue's key among a manager's writes (never a topic name: those have no NUL)."""


def _check_participant(participant_id: object) -> str:
    return check_name(participant_id, "participant_id")


class ContextSubscriber(Agent):
    """The agent ``subscriber()`` returns: the manager's replica of the section views.

    Registering it attaches the manager to that runtime (and, local, registers the
    section actors and compaction workers there too), in ``on_register``: before the
    runtime starts.
    """

    def __init__(self, manager: ContextManager) -> None:
        self._manager = manager

    def on_register(self) -> None:
        assert self.runtime is not None  # register() set it
        self._manager._attach(self.runtime, self.name or self._manager.plan.namespace)

    def handlers(self) -> Handlers:
        """The section views and host restarts every replica follows, and this manager's
        own forget barrier and compaction reports."""
        topics, manager_id = self._manager.plan.topics, self._manager.id
        return {
            topics.view: self.on_view,
            topics.replica(manager_id): self.on_forget,
            topics.host_started: self.on_host_started,
            topics.compacted(manager_id): self.on_compacted,
        }

    def gauges(self) -> dict[str, float]:
        """The replica's size and its evictions (``max_participants``), for ``xrmq top``."""
        return {
            "context.replica_participants": float(self._manager.participants),
            "context.replicas_evicted": float(self._manager.replicas_evicted),
            "context.replica_fetches": float(self._manager.replica_fetches),
        }

    @superseding(lambda view: (view.section, view.dialogue, view.host, view.epoch))
    async def on_view(self, message: SectionView, ctx: RuntimeContext) -> None:
        """A section's newest view. Views of one section from one host incarnation come from
        one sender in order, and each replaces the previous one whole (its acks are
        cumulative), so a view still queued is superseded by the next (``superseding``);
        and a turn's request is taken before queued views (the runtime's request lane)."""
        if ctx.participant_id is not None:
            self._manager._on_view(ctx.participant_id, message)

    async def on_host_started(self, message: HostStarted, ctx: RuntimeContext) -> None:
        self._manager._on_host_started(message)

    async def on_compacted(self, message: CompactReport, ctx: RuntimeContext) -> None:
        self._manager._on_compacted(message)

    async def on_forget(self, message: ForgetParticipant, ctx: RuntimeContext) -> bool:
        if ctx.participant_id is not None:
            self._manager._on_forget(ctx.participant_id, message.generations)
        return True

    async def on_start(self) -> None:
        await self._manager._on_ready()

    async def on_stop(self) -> None:
        self._manager._on_stopped()


class ContextManager:
    """Retain participant-scoped context and render it into prompts for any number of agents.

    The SDK's constructor (same names and defaults, docs/context.md), plus xrmq's deployment
    options:
    ``deployment`` (``"local"`` or ``"split"``), ``namespace`` of the internal topics,
    the worker pool (``compaction_workers``, ``worker_concurrency``), the job timeout
    after which a job goes to another worker (``compaction_timeout_s``) and the bound on
    each clear/cancel round trip (``control_timeout_s``). All budgets must be positive;
    topic lists hold non-empty names, unique within and across both lists; a per-topic
    budget mapping covers every configured topic; the compaction input budget is at
    least half the largest section budget plus 256 bytes.

    ``store``: the journal's path for a local manager (None: memory only); a
    manager given the path of an earlier one's journal starts with its context.
    ``on_corrupt``: ``"error"`` (a ``StoreError`` naming the file) or
    ``"backup_and_start_empty"`` for a journal that cannot be read (a row that cannot
    be read is quarantined either way: only its participant's section starts empty).
    ``max_participants`` bounds the replica (views arrive from the bus for any
    participant): beyond it the least recently used participant without a write in
    flight is dropped from the replica, counted in ``replicas_evicted`` and logged (once
    per interval, with the count); its context stays in the section actors, and
    ``ensure`` (awaited by a conversation before it builds an answer) fetches it back
    whole, counted in ``replica_fetches``.
    ``retire_idle_s`` and ``max_resident_participants`` (with ``store``): a topic
    section keeps in memory only participants written within ``retire_idle_s`` and at
    most ``max_resident_participants``; the others live in the journal alone and are
    loaded back on their next write (``ContextPlan``).
    ``snapshot_at_start`` (split): build the replica from every host's snapshot when the
    runtime starts (a conversation's process); False: hold only the participants asked
    about (``ensure``), as ``xrmq context show`` does for its one participant.
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
        summary_guards: bool = False,
        deployment: Deployment = "local",
        namespace: str = DEFAULT_NAMESPACE,
        compaction_workers: int = DEFAULT_COMPACTION_WORKERS,
        worker_concurrency: int = DEFAULT_WORKER_CONCURRENCY,
        compaction_timeout_s: float = DEFAULT_COMPACTION_TIMEOUT_S,
        control_timeout_s: float = DEFAULT_CONTROL_TIMEOUT_S,
        store: str | os.PathLike[str] | None = None,
        on_corrupt: OnCorrupt = "error",
        section_hosts: int = 1,
        max_participants: int = DEFAULT_MAX_PARTICIPANTS,
        snapshot_at_start: bool = True,
        retire_idle_s: float = DEFAULT_RETIRE_IDLE_S,
        max_resident_participants: int = DEFAULT_MAX_RESIDENT_PARTICIPANTS,
    ) -> None:
        if (
            isinstance(max_participants, bool)
            or not isinstance(max_participants, int)
            or max_participants < 1
        ):
            raise ValueError(f"max_participants: must be a positive int, got {max_participants!r}")
        if deployment not in ("local", "split"):
            raise ValueError(f"deployment: must be 'local' or 'split', got {deployment!r}")
        if store is not None and deployment != "local":
            raise ValueError(
                "store: only a local manager hosts sections; a split deployment's section "
                "processes journal ([context] state_dir)"
            )
        self.plan: ContextPlan = context_plan(
            summary_context_topics=summary_context_topics,
            incremental_context_topics=incremental_context_topics,
            dialogue_budget_bytes=dialogue_budget_bytes,
            topic_budget_bytes=topic_budget_bytes,
            compaction_input_budget_bytes=compaction_input_budget_bytes,
            compaction_prompts=compaction_prompts,
            summary_guards=summary_guards,
            namespace=namespace,
            compaction_workers=compaction_workers,
            worker_concurrency=worker_concurrency,
            compaction_timeout_s=compaction_timeout_s,
            control_timeout_s=control_timeout_s,
            section_hosts=section_hosts,
            retire_idle_s=retire_idle_s,
            max_resident_participants=max_resident_participants,
        )
        self.llm = llm
        self.deployment = deployment
        self.id = uuid4().hex[:12]
        self._log = get_logger(actor=f"{namespace}.manager")
        self._replicas: OrderedDict[str, ParticipantReplica] = OrderedDict()
        """Participant -> replica, least recently used first (bounded: ``max_participants``)."""
        self.max_participants = max_participants
        self.replicas_evicted = 0
        """Participants dropped from the replica over ``max_participants``."""
        self.replica_fetches = 0
        """Participants fetched from the section hosts (``ensure``) after evictions."""
        self._fetches: dict[str, asyncio.Task[bool]] = {}
        self._silent_hosts: dict[int, float] = {}
        """Hosts a fetch timed out on -> the loop time until which fetches skip them (a
        view or ``HostStarted`` of the host ends it early)."""
        self.snapshot_at_start = snapshot_at_start
        self._warnings = AggregatedWarnings(self._log)
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
        self._inflight: dict[int, tuple[Topic, Any, str, str]] = {}
        """Writes not yet acknowledged: seq -> (topic, message, participant, section)."""
        self._host_epochs: dict[int, int] = {}
        self._resyncs: dict[int, asyncio.Task[None]] = {}
        self._reports: dict[int, asyncio.Future[CompactReport]] = {}
        self.resyncs = 0
        """Full-snapshot resyncs completed (a host restarted, or this manager started)."""
        self.host: ContextHost | None = None
        """The local deployment's section host, once attached."""
        self.store: ContextStore | None = None
        if store is not None:
            self.store = open_store(store, on_corrupt=on_corrupt)
            self._replicate_recovered(self.store)

    # --- attachment --------------------------------------------------------------------

    def subscriber(self) -> Agent:
        """Return an Agent that applies the configured context topics to this manager.

        Register it with the same AgentRuntime that delivers the updates, before the
        runtime starts. Local, it brings the section actors and compaction workers
        into that runtime. Requires at least one configured topic when local (a
        split manager's subscriber is its replica, topics or not).
        """
        if not self.plan.config.topics and self.deployment == "local":
            raise ValueError(
                "subscriber: configure at least one topic (summary_context_topics or "
                "incremental_context_topics) before calling this method"
            )
        return self._new_subscriber()

    def _new_subscriber(self) -> ContextSubscriber:
        return ContextSubscriber(self)

    def _attach(self, runtime: AgentRuntime, name: str) -> None:
        if self._runtime is not None:
            raise RuntimeError(
                "subscriber: this ContextManager is already attached to runtime "
                f"{self._runtime.name!r}"
            )
        self._runtime, self._name = runtime, name
        if self.deployment == "local":
            self.host = register_sections(runtime, self.plan, name=name, store=self.store)
            register_workers(runtime, self.plan, self.llm, name=name)

    def _replicate_recovered(self, store: ContextStore) -> None:
        """The replica of a journal's states, rendered here, before any actor runs."""
        sections = {journal_name(section): section for section in self.plan.config.sections}
        for (participant_id, name), recovered in store.recovered.items():
            section = sections.get(name)
            if section is None:
                continue
            state = recovered.state
            view = SectionView(
                section.spec.name,
                section.spec.kind == "dialogue",
                state.generation,
                state.revision,
                section.render(state).blocks,
                *(recovered.acks[-1] if recovered.acks else ("", 0)),
                acks=recovered.acks,
            )
            self._replica(participant_id).apply_view(view, self.id)

    async def _on_ready(self) -> None:
        runtime, outbox, self._outbox = self._runtime, self._outbox, []
        assert runtime is not None  # the subscriber is ready only on a runtime
        for topic, message, participant_id in outbox:
            runtime.send(topic, message, participant_id=participant_id, source=self._name)
        # a (re)started process: its replica from every host's snapshot
        if self.deployment == "split" and self.snapshot_at_start:
            await asyncio.gather(*(self._resync(host) for host in range(self.plan.section_hosts)))

    def _on_stopped(self) -> None:
        for _, _, future in self._waiters.values():
            if not future.done():
                future.set_exception(RuntimeClosedError("update: the context runtime stopped"))

    def _start_private(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "ContextManager: register subscriber() with a runtime, or write from a running "
                "event loop "
                "(the manager then hosts its actors on a private runtime)"
            ) from None
        runtime = AgentRuntime(name=f"{self.plan.namespace}-{self.id}")
        runtime.register(self.plan.namespace, self._new_subscriber())
        self._private = runtime
        self._private_start = loop.create_task(
            runtime.start(), name=f"xrmq-context-{self.id}-start"
        )

    def _send_write(self, topic: Topic, message: Any, participant_id: str, section: str) -> bool:
        """Send a write the section acknowledges; kept until then, to re-send after a restart."""
        self._inflight[message.seq] = (topic, message, participant_id, section)
        return self._send(topic, message, participant_id)

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
        self._silent_hosts.pop(view.host, None)
        known = self._host_epochs.get(view.host)
        if known is not None and view.epoch < known:
            return  # from an incarnation before the host's restart
        if known is None or view.epoch > known:
            self._host_epochs[view.host] = view.epoch
            if known is not None:
                self._start_resync(view.host)
        self._apply(participant_id, view)
        self._changed()

    def _apply(self, participant_id: str, view: SectionView) -> None:
        replica = self._replica(participant_id)
        replica.apply_view(view, self.id)
        acked = view_ack(view, self.id)
        if acked:
            self._acknowledged(
                participant_id, DIALOGUE_KEY if view.dialogue else view.section, acked
            )

    def _acknowledged(self, participant_id: str, section: str, upto: int) -> None:
        for seq in [
            seq
            for seq, (_, _, pid, name) in self._inflight.items()
            if seq <= upto and pid == participant_id and name == section
        ]:
            del self._inflight[seq]
        self._release(
            lambda name, pid, seq: pid == participant_id and name == section and seq <= upto
        )

    # --- restarts ------------------------------------------------------------------------

    def _on_host_started(self, started: HostStarted) -> None:
        self._silent_hosts.pop(started.host, None)
        if self._host_epochs.get(started.host) != started.epoch:
            self._start_resync(started.host)

    @property
    def resyncing(self) -> bool:
        """A resync from a restarted section host's full snapshot is under way."""
        return bool(self._resyncs)

    def _start_resync(self, host: int) -> None:
        if host in self._resyncs or self._closed:
            return
        task = asyncio.get_running_loop().create_task(
            self._resync(host), name=f"xrmq-context-resync-{host}"
        )
        self._resyncs[host] = task
        task.add_done_callback(lambda _: self._resync_done(host, task))

    def _resync_done(self, host: int, task: asyncio.Task[None]) -> None:
        if self._resyncs.get(host) is task:
            del self._resyncs[host]
        self._changed()

    async def _resync(self, host: int) -> None:
        """Replace every view of ``host`` by its full snapshot; re-send unacknowledged writes."""
        runtime = self._runtime
        if runtime is None or not runtime.running:
            return
        present: dict[str, set[str]] = {}
        """Participant -> the sections the snapshot holds."""
        epoch: int | None = None
        after: str | None = None
        pages = views = 0
        while True:
            try:
                page = await runtime.ask(
                    self.plan.topics.host_sync(host),
                    HostSync(after=after, page_bytes=runtime.max_message_bytes),
                    reply_type=HostViews,
                    source=self._name,
                    timeout=self.plan.control_timeout_s,
                )
            except (TimeoutError, RuntimeError) as error:
                self._log.warning(
                    "context.resync_unanswered", host=host, pages=pages, error=repr(error)
                )
                return
            if self._closed:
                return
            if epoch is not None and page.epoch != epoch and after is not None:
                # the host restarted between pages: its snapshot again, from the start
                present.clear()
                epoch, after = page.epoch, None
                continue
            epoch = page.epoch
            self._host_epochs[host] = max(self._host_epochs.get(host, 0), epoch)
            pages += 1
            views += len(page.views)
            for participant_id, view in page.views:
                self._apply(participant_id, view)
                present.setdefault(participant_id, set()).add(view.section)
            if page.next_after is None:
                break
            after = page.next_after
        for participant_id, replica in list(self._replicas.items()):
            replica.drop_host(host, epoch, present.get(participant_id, set()))
            if replica.empty:
                del self._replicas[participant_id]
        for topic, message, participant_id, _ in list(self._inflight.values()):
            runtime.send(topic, message, participant_id=participant_id, source=self._name)
        # Over before it is counted: a task resumed between the count and the done callback
        # must not see ``resyncs`` grown while ``resyncing`` still holds.
        if self._resyncs.get(host) is asyncio.current_task():
            del self._resyncs[host]
        self.resyncs += 1
        self._log.info(
            "context.resynced",
            host=host,
            epoch=epoch,
            pages=pages,
            views=views,
            resent=len(self._inflight),
        )
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
        """Wait until every write made through this manager is in its section's view
        (so in its journal), and no resync is under way."""
        while (
            self._waiters
            or self._resyncs
            or any(replica.pending for replica in self._replicas.values())
        ):
            await self.changed()

    @property
    def participants(self) -> int:
        """Participants the replica holds now (at most ``max_participants``)."""
        return len(self._replicas)

    def _replica(self, participant_id: str) -> ParticipantReplica:
        replica = self._replicas.get(participant_id)
        if replica is None:
            replica = self._replicas[participant_id] = ParticipantReplica(
                complete=self._complete_by_default
            )
            if len(self._replicas) > self.max_participants:
                self._evict(participant_id)
        else:
            self._replicas.move_to_end(participant_id)
        return replica

    @property
    def _complete_by_default(self) -> bool:
        """Whether a participant the replica does not hold has no context at the hosts:
        so while every view since the start (and every host's snapshot) is here, i.e.
        until the replica first evicts (or for a manager that takes no snapshot at start,
        never)."""
        return self.snapshot_at_start and not self.replicas_evicted

    async def ensure(self, participant_id: str) -> bool:
        """Make the replica hold a participant's whole context before it is rendered.

        A participant evicted from the replica (``max_participants``), or back in it by
        one section's view only, is fetched from every section host (one ``HostSync`` of
        that participant each, within ``control_timeout_s``); concurrent calls for one
        participant share one fetch. At once when the replica holds it whole, or when
        the replica never evicted (it then holds everything the hosts hold). Returns
        whether the replica holds it whole: False when a host did not answer (logged;
        ``blocks()`` then shows what the replica has) or no runtime runs. A host that
        did not answer is not asked again for ``control_timeout_s`` unless it is heard
        from (a view, its ``HostStarted``), so while it is down an answer waits for it
        once, not at every turn.
        """
        _check_participant(participant_id)
        replica = self._replicas.get(participant_id)
        if replica is not None and replica.complete:
            return True
        if replica is None and self._complete_by_default:
            return True
        fetch = self._fetches.get(participant_id)
        if fetch is None:
            runtime = self._runtime
            if self._closed or runtime is None or not runtime.running:
                return False
            fetch = asyncio.get_running_loop().create_task(
                self._fetch(runtime, participant_id), name="xrmq-context-fetch"
            )
            self._fetches[participant_id] = fetch
            fetch.add_done_callback(lambda _: self._fetches.pop(participant_id, None))
        return await asyncio.shield(fetch)

    async def _fetch(self, runtime: AgentRuntime, participant_id: str) -> bool:
        """Apply every host's views of one participant; mark it whole if all answered."""
        self.replica_fetches += 1
        loop = asyncio.get_running_loop()
        now = loop.time()
        hosts = [
            host
            for host in range(self.plan.section_hosts)
            if self._silent_hosts.get(host, now) <= now
        ]
        replies = await asyncio.gather(
            *(
                runtime.ask(
                    self.plan.topics.host_sync(host),
                    HostSync(participant_id),
                    reply_type=HostViews,
                    source=self._name,
                    timeout=self.plan.control_timeout_s,
                )
                for host in hosts
            ),
            return_exceptions=True,
        )
        whole = len(hosts) == self.plan.section_hosts
        for host, reply in zip(hosts, replies):
            if isinstance(reply, BaseException):
                whole = False
                if isinstance(reply, TimeoutError):
                    self._silent_hosts[host] = loop.time() + self.plan.control_timeout_s
                self._log.warning(
                    "context.fetch_unanswered",
                    host=host,
                    participant=participant_id,
                    error=repr(reply),
                )
                continue
            if self._closed:
                return False
            known = self._host_epochs.get(host)
            if known is not None and reply.epoch < known:
                whole = False  # an answer of the host's previous incarnation
                continue
            for pid, view in reply.views:
                if pid == participant_id:
                    self._on_view(pid, view)
        if whole:
            self._replica(participant_id).complete = True
        self._changed()
        return whole

    def _evict(self, keep: str) -> None:
        """Drop the least recently used participant that has no write in flight here."""
        busy = {item[2] for item in self._inflight.values()}
        busy.update(item[1] for item in self._waiters.values())
        busy.update(self._fetches)
        busy.add(keep)
        for participant_id, replica in self._replicas.items():
            if participant_id not in busy and not replica.pending:
                del self._replicas[participant_id]
                self.replicas_evicted += 1
                self._warnings.warn(
                    "context.replica_evicted",
                    None,
                    None,
                    participant=participant_id,
                    max_participants=self.max_participants,
                    evicted=self.replicas_evicted,
                )
                return

    # --- the SDK's methods ----------------------------------------------------------------

    def blocks(self, participant_id: str) -> tuple[ContextBlock, ...]:
        """Render a participant's dialogue and topic context: summaries first, then newer
        entries in time order. Synchronous, from the local replica."""
        replica = self._replicas.get(_check_participant(participant_id))
        if replica is None:
            return ()
        self._replicas.move_to_end(participant_id)
        return replica.blocks(self.plan.config)

    def section_blocks(self, participant_id: str) -> dict[str, tuple[ContextBlock, ...]]:
        """Each section's blocks for a participant as its section renders them (the
        dialogue with this manager's pending writes), by section name; for sizes."""
        replica = self._replicas.get(_check_participant(participant_id))
        if replica is None:
            return {}
        config = self.plan.config
        sections = {
            config.dialogue.spec.name: replica.dialogue_blocks(config.dialogue.spec.budget_bytes)
        }
        for section in config.topics:
            view = replica.topics.get(section.spec.name)
            if view is not None:
                sections[section.spec.name] = view.blocks
        return sections

    def record_exchange(
        self,
        participant_id: str,
        request: str,
        answer: str,
        *,
        timestamp_us: int,
        exchange_id: object | None,
    ) -> None:
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

    def reconcile_history(
        self,
        participant_id: str,
        exchanges: Sequence[tuple[str, str, int | None]],
        *,
        exchange_ids: Sequence[object | None],
    ) -> None:
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

    def _write_exchanges(
        self,
        participant_id: str,
        replica: ParticipantReplica,
        exchanges: list[tuple[bytes, str, str, int]],
    ) -> None:
        seq = next(self._seq)
        records = tuple(
            ExchangeRecord(identity, request, answer, when)
            for identity, request, answer, when in exchanges
        )
        for record in records:
            replica.identities.add(record.identity)
            replica.pending.append(
                (
                    seq,
                    ContextBlock(
                        record.timestamp_us,
                        exchange_text(record.request, record.answer, record.timestamp_us),
                    ),
                )
            )
        self._send_write(
            self.plan.topics.dialogue_write,
            RecordExchanges(self.id, seq, records),
            participant_id,
            DIALOGUE_KEY,
        )
        self._changed()

    async def update(
        self,
        participant_id: str,
        source: str,
        update: ConversationContextUpdate,
        *,
        mode: Literal["summary", "incremental"],
        timestamp_us: int | None = None,
    ) -> None:
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
            if self._send_write(
                self.plan.topics.topic_write(source),
                TopicWrite(self.id, seq, update.text, when),
                participant_id,
                source,
            ):
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
            self._inflight.pop(seq, None)

    async def clear(self, participant_id: str) -> None:
        """Forget a participant's context after cancelling its compaction jobs.

        Returns once every section forgot it, its jobs' model streams are closed and the
        replica dropped it. Idempotent; other participants are unaffected; later writes
        for the participant start new context.
        """
        _check_participant(participant_id)
        for seq in [seq for seq, item in self._inflight.items() if item[2] == participant_id]:
            del self._inflight[seq]
        replica = self._replicas.get(participant_id)
        if replica is not None:
            replica.pending.clear()
            replica.identities.clear()
        runtime = self._runtime
        if runtime is None or not runtime.running:
            self._outbox = [item for item in self._outbox if item[2] != participant_id]
            self._on_forget(participant_id, ())
            self._replicas.pop(participant_id, None)
            if self.store is not None and self.store.open:  # no section runs: the rows go here
                for section in self.plan.config.sections:
                    self.store.delete(participant_id, journal_name(section))
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
            for error in await self._clear_remote(
                runtime, list(self._replicas), close=self.deployment == "local"
            ):
                self._log.warning("context.close_incomplete", error=repr(error))
        self._replicas.clear()
        self._outbox.clear()
        self._inflight.clear()
        self._release(lambda section, pid, seq: True)
        for task in list(self._resyncs.values()):
            task.cancel()
        self._changed()
        if self._private is not None:
            await self._private.stop()
        if self.store is not None and self.store.open:
            self.store.delete_all()  # close() leaves no row, even of participants never loaded here
            if self._runtime is None or not self._runtime.running:
                self.store.close()  # not running: no host closes it

    # --- serialization and manual compaction (docs/tools.md) ---------------------------------

    async def _running_runtime(self, operation: str) -> AgentRuntime:
        if self._closed:
            raise RuntimeError(f"{operation}: the ContextManager is closed")
        if self._runtime is None:
            self._start_private()
        if self._private_start is not None:
            await asyncio.shield(self._private_start)
        runtime = self._runtime
        if runtime is None or not runtime.running:
            raise RuntimeError(f"{operation}: the context runtime is not running")
        return runtime

    async def dump(self, participant_id: str | None = None) -> bytes:
        """Serialize every participant's context (or one participant's) to bytes.

        The versioned msgspec format of ``dump.ContextDump``: per section the summary,
        the verbatim entries and the exchange identities, as the section actors hold
        them (their journaled state), read from each host page by page (within the bus's
        message limit). ``load`` reads it back.
        """
        if participant_id is not None:
            _check_participant(participant_id)
        runtime = await self._running_runtime("dump")
        hosts = await asyncio.gather(
            *(
                self._dump_host(runtime, host, participant_id)
                for host in range(self.plan.section_hosts)
            )
        )
        merged: dict[str, list] = {}
        for host_participants in hosts:
            for participant in host_participants:
                merged.setdefault(participant.participant_id, []).extend(participant.sections)
        participants = tuple(
            ParticipantDump(
                pid,
                tuple(sorted(sections, key=lambda dump: (dump.kind != "dialogue", dump.section))),
            )
            for pid, sections in sorted(merged.items())
        )
        return encode_dump(ContextDump(participants))

    async def _dump_host(
        self, runtime: AgentRuntime, host: int, participant_id: str | None
    ) -> list[ParticipantDump]:
        """One host's section states (of one participant), page by page."""
        participants: list[ParticipantDump] = []
        after: str | None = None
        while True:
            page = await runtime.ask(
                self.plan.topics.host_dump(host),
                HostSync(participant_id, after=after, page_bytes=runtime.max_message_bytes),
                reply_type=HostDump,
                source=self._name,
                timeout=self.plan.control_timeout_s,
            )
            participants.extend(page.participants)
            if page.next_after is None:
                return participants
            after = page.next_after

    async def load(self, data: bytes) -> int:
        """Merge a ``dump()`` into this manager's context; return the sections loaded.

        Merged by exchange identity (and, for topic entries, time and text), so loading
        the same dump twice records nothing twice. Returns once every section
        acknowledged its part (so it is journaled). A section this manager does not
        configure (another topic, another mode) is skipped with a warning.
        ``ValueError`` for data that is not a dump of a version this xrmq reads.
        """
        dump = decode_dump(data)
        await self._running_runtime("load")
        topics = self.plan.topics
        modes = {section.spec.name: section.spec.kind for section in self.plan.config.topics}
        waits: list[asyncio.Future[None]] = []
        seqs: list[int] = []
        for participant in dump.participants:
            pid = _check_participant(participant.participant_id)
            for section in participant.sections:
                if section.kind == "dialogue":
                    topic, key = topics.dialogue_load, DIALOGUE_KEY
                    self._replica(pid).identities.update(section.identities)
                elif modes.get(section.section) == section.kind:
                    topic, key = topics.topic_load(section.section), section.section
                else:
                    self._log.warning(
                        "context.load_skipped",
                        participant=pid,
                        section=section.section,
                        kind=section.kind,
                    )
                    continue
                seq = next(self._seq)
                future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiters[seq] = (key, pid, future)
                seqs.append(seq)
                waits.append(future)
                self._send_write(topic, LoadSection(self.id, seq, section), pid, key)
        try:
            await asyncio.wait_for(asyncio.gather(*waits), self.plan.control_timeout_s)
        except TimeoutError:
            raise TimeoutError(
                f"load: the sections did not apply it within {self.plan.control_timeout_s}s"
            ) from None
        finally:
            for seq in seqs:
                self._waiters.pop(seq, None)
        return len(waits)

    async def compact(self, participant_id: str, section: str | None = None) -> CompactOutcome:
        """Compact a participant's context now, whatever the half-budget trigger says.

        ``section``: ``"dialogue"`` or a configured incremental topic; None: the dialogue
        and every incremental topic (a summary topic is never compacted). Returns, per
        section, COMPACTED (the entries are in the rolling summary), NOTHING_TO_CONDENSE
        (nothing changed) or SUMMARIZE_FAILED (the model failed; the entries stay).
        """
        _check_participant(participant_id)
        topics = self.plan.topics
        incremental = [s.spec.name for s in self.plan.config.topics if s.spec.kind == "incremental"]
        if section is None:
            targets = [(self.plan.config.dialogue.spec.name, topics.dialogue_compact)]
            targets += [(name, topics.topic_compact(name)) for name in incremental]
        elif section == self.plan.config.dialogue.spec.name:
            targets = [(section, topics.dialogue_compact)]
        elif section in incremental:
            targets = [(section, topics.topic_compact(section))]
        else:
            raise ValueError(
                f"section: must be 'dialogue' or an incremental topic "
                f"({', '.join(incremental) or 'none configured'}), got {section!r}"
            )
        runtime = await self._running_runtime("compact")
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[CompactReport]] = []
        seqs = []
        for _, topic in targets:
            seq = next(self._seq)
            future: asyncio.Future[CompactReport] = loop.create_future()
            self._reports[seq] = future
            seqs.append(seq)
            futures.append(future)
            runtime.send(
                topic,
                CompactSection(self.id, seq),
                participant_id=participant_id,
                source=self._name,
            )
        timeout = (
            self.plan.compaction_timeout_s * (self.plan.compaction_workers + 1)
            + self.plan.control_timeout_s
        )
        try:
            reports = await asyncio.wait_for(asyncio.gather(*futures), timeout)
        except TimeoutError:
            raise TimeoutError(
                f"compact: no report from the sections within {timeout:g}s"
            ) from None
        finally:
            for seq in seqs:
                self._reports.pop(seq, None)
        await self.synced()
        return CompactOutcome(
            participant_id,
            tuple(
                SectionOutcome(name, CompactStatus(report.status), report.detail)
                for (name, _), report in zip(targets, reports)
            ),
        )

    def _on_compacted(self, report: CompactReport) -> None:
        future = self._reports.get(report.seq)
        if future is not None and not future.done():
            future.set_result(report)

    async def _clear_remote(
        self, runtime: AgentRuntime, participants: list[str], *, close: bool
    ) -> list[BaseException]:
        """Clear sections, cancel and await the jobs they held, then drop the replica's views
        (the protocol of ``clearing.py``). Returns the failures of sections that did not
        answer (their state may remain)."""
        return await clear_remote(
            runtime,
            self.plan,
            self.id,
            participants,
            close=close,
            source=self._name,
            log=self._log,
        )
