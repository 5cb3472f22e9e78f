"""``ContextManager``: the SDK's facade over the context actors.

The manager writes to section actors over the bus and keeps a local replica of their
views (``replication``), so ``blocks()`` is synchronous and local and never sees a
half-applied change. ``record_exchange``/``reconcile_history`` are synchronous and
read-your-writes: the manager decides with the engine's own rules what is new, renders it
into its replica at once, and drops that overlay when the dialogue section's view
acknowledges the write (``writes``). ``update`` returns once its topic's section
acknowledged it. No method waits for a model.

Deployment:

- ``local`` (default): ``runtime.register("context", context.subscriber())`` also
  registers the section actors and the compaction workers in that runtime (the
  subscriber attaches the manager when the runtime registers it). A manager used before
  any subscriber was registered (e.g. one without topics, which has no subscriber)
  hosts the same actors on a private runtime of its own (an embedded bus), closed by
  ``close()`` (``hosting``).
- ``split``: the subscriber is only the replica; other processes host the sections
  (``register_sections``) and the workers (``register_workers``) from the same
  ``ContextPlan`` (``context_plan`` with the same keyword arguments).

Durability (``store=PATH`` local; ``[context] state_dir``/``persist`` for an edge
box): a write a section acknowledged (an ``update`` that returned, an exchange that
``synced()`` waited for) is in the section host's journal. ``clear`` removes the
participant's rows before it returns; ``close`` removes every row of this manager.

Restarts and scale are the replica's (``replication``): a restarted section host is
resynced from its snapshot and sent the writes it had not acknowledged (``resyncing``,
``synced()``); a replica over ``max_participants`` evicts, and ``ensure`` fetches an
evicted participant back before its context is rendered.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Literal
from uuid import uuid4

from xrmq.actors.clock import now_us
from xrmq.actors.models import LLMService
from xrmq.actors.runtime import Agent, AgentRuntime, get_logger
from xrmq.schemas import CompactionPrompts, ContextBlock, ConversationContextUpdate, SectionSize
from xrmq.schemas._validation import check_name

from .clearing import clear_remote
from .clip import utf8_size
from .context_host import ContextHost
from .dump import decode_dump
from .hosting import Deployment, ManagerRuntime
from .journal import ContextStore, journal_name
from .manual import CompactOutcome
from .messages import ExchangeRecord, RecordExchanges, SectionView, TopicWrite
from .operations import compact_context, compact_targets, dump_context, load_context
from .plan import (
    DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
    DEFAULT_COMPACTION_TIMEOUT_S,
    DEFAULT_COMPACTION_WORKERS,
    DEFAULT_CONTROL_TIMEOUT_S,
    DEFAULT_DIALOGUE_BUDGET_BYTES,
    DEFAULT_MAX_RESIDENT_PARTICIPANTS,
    DEFAULT_NAMESPACE,
    DEFAULT_RETIRE_IDLE_S,
    DEFAULT_TOPIC_BUDGET_BYTES,
    DEFAULT_WORKER_CONCURRENCY,
    ContextPlan,
    context_plan,
)
from .render import check_timestamp, exchange_text
from .replica import ParticipantReplica
from .replication import DIALOGUE_KEY, ContextReplica
from .state import exchange_identity, history_tail
from .store import OnCorrupt, open_store
from .subscriber import ContextSubscriber
from .writes import Writes

DEFAULT_MAX_PARTICIPANTS = 4096
"""Participants a manager's replica holds (``max_participants``)."""


def _check_participant(participant_id: object) -> str:
    return check_name(participant_id, "participant_id")


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
        summary_guards: bool = True,
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
        self.store: ContextStore | None = None
        if store is not None:
            self.store = open_store(store, on_corrupt=on_corrupt)
        self._hosting = ManagerRuntime(
            self.plan,
            llm,
            deployment=deployment,
            manager_id=self.id,
            store=self.store,
            subscriber=self._new_subscriber,
        )
        self._writes = Writes(self._hosting)
        self._replica = ContextReplica(
            self.plan,
            self.id,
            self._hosting,
            self._writes,
            self._log,
            max_participants=max_participants,
            snapshot_at_start=snapshot_at_start,
        )
        self.max_participants = max_participants
        self.snapshot_at_start = snapshot_at_start
        self._replicas = self._replica.participants
        """Participant -> replica (``ContextReplica.participants``)."""
        self._closing: asyncio.Task[None] | None = None
        if self.store is not None:
            self._replica.recover(self.store)

    # --- attachment and state ----------------------------------------------------------

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
        return ContextSubscriber(self._hosting, self._replica, self._writes, self.id)

    @property
    def host(self) -> ContextHost | None:
        """The local deployment's section host, once attached."""
        return self._hosting.host

    @property
    def _runtime(self) -> AgentRuntime | None:
        """The runtime the manager is attached to (its subscriber's, or its private one);
        settable so a test can put scripted section hosts behind the replica."""
        return self._hosting.runtime

    @_runtime.setter
    def _runtime(self, runtime: AgentRuntime | None) -> None:
        self._hosting.runtime = runtime

    @property
    def participants(self) -> int:
        """Participants the replica holds now (at most ``max_participants``)."""
        return len(self._replica.participants)

    @property
    def replicas_evicted(self) -> int:
        """Participants dropped from the replica over ``max_participants``."""
        return self._replica.evicted

    @property
    def replica_fetches(self) -> int:
        """Participants fetched from the section hosts (``ensure``) after evictions."""
        return self._replica.fetches

    @property
    def resyncs(self) -> int:
        """Full-snapshot resyncs completed (a host restarted, or this manager started)."""
        return self._replica.resyncs

    @property
    def resyncing(self) -> bool:
        """A resync from a restarted section host's full snapshot is under way."""
        return self._replica.resyncing

    def _on_view(self, participant_id: str, view: SectionView) -> None:
        """Apply a view as the subscriber does when one arrives (tests and benchmarks feed
        the replica through it without a bus)."""
        self._replica.on_view(participant_id, view)

    async def _resync(self, host: int) -> None:
        """Resync ``host`` now, as the replica does when it sees the host restart (tests
        and benchmarks time and check a resync through it)."""
        await self._replica.resync(host)

    async def changed(self) -> None:
        """Wait until the local replica next changes (a view arrived, a write or clear).

        Lets an agent react to new context instead of polling ``blocks()``.
        """
        await self._replica.changed()

    async def synced(self) -> None:
        """Wait until every write made through this manager is in its section's view
        (so in its journal), and no resync is under way."""
        await self._replica.synced()

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
        return await self._replica.ensure(participant_id)

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

    def section_sizes(self, participant_id: str) -> tuple[SectionSize, ...]:
        """Each section's rendered size against its budget (UTF-8 bytes), in configured
        order, as ``blocks`` renders them now; none for a participant without context here."""
        blocks = self.section_blocks(participant_id)
        config = self.plan.config
        budgets = [(s.spec.name, s.spec.budget_bytes) for s in (config.dialogue, *config.topics)]
        return tuple(
            SectionSize(name, sum(utf8_size(block.text) for block in blocks[name]), budget)
            for name, budget in budgets
            if name in blocks
        )

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
        if self._replica.closed:
            return
        identity = exchange_identity(request, answer, timestamp_us, exchange_id)
        replica = self._replica.replica(participant_id)
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
        if self._replica.closed or not tail:
            return
        self._write_exchanges(participant_id, self._replica.replica(participant_id), tail)

    async def retract_exchange(self, participant_id: str, exchange_id: object) -> None:
        """Take back the exchange recorded with ``exchange_id`` (a retried or revised turn);
        returns once the dialogue section applied and journaled it (``blocks()`` here and at
        every replica lacks it). Idempotent; ``TimeoutError`` as ``update`` (then re-sent)."""
        _check_participant(participant_id)
        if exchange_id is None:
            raise ValueError("retract_exchange: exchange_id must name the exchange")
        if not self._replica.closed:
            identity = exchange_identity("", "", None, exchange_id)
            replica = self._replica.replica(participant_id)
            seq, sent = self._write_exchanges(participant_id, replica, [], (identity,))
            await self._writes.applied(seq, DIALOGUE_KEY, participant_id, sent, "retract")

    def _write_exchanges(
        self,
        participant_id: str,
        replica: ParticipantReplica,
        exchanges: list[tuple[bytes, str, str, int]],
        retracted: tuple[bytes, ...] = (),
    ) -> tuple[int, bool]:
        """Send a dialogue write (shown here at once): its seq, and whether it went out now."""
        seq = self._writes.next_seq()
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
        sent = self._writes.send(
            self.plan.topics.dialogue_write,
            RecordExchanges(self.id, seq, records, retracted),
            participant_id,
            DIALOGUE_KEY,
        )
        self._replica.notify()
        return seq, sent

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
        if self._replica.closed:
            return
        seq = self._writes.next_seq()
        future = self._writes.expect(seq, source, participant_id)
        try:
            if self._writes.send(
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
            self._writes.settle(seq)

    async def clear(self, participant_id: str) -> None:
        """Forget a participant's context after cancelling its compaction jobs.

        Returns once every section forgot it, its jobs' model streams are closed and the
        replica dropped it. Idempotent; other participants are unaffected; later writes
        for the participant start new context.
        """
        _check_participant(participant_id)
        self._writes.drop(participant_id)
        replica = self._replicas.get(participant_id)
        if replica is not None:
            replica.pending.clear()
            replica.identities.clear()
        runtime = self._hosting.runtime
        if runtime is None or not runtime.running:
            self._hosting.drop(participant_id)
            self._replica.on_forget(participant_id, ())
            self._replicas.pop(participant_id, None)
            if self.store is not None and self.store.open:  # no section runs: the rows go here
                for section in self.plan.config.sections:
                    self.store.delete(participant_id, journal_name(section))
            return
        # the sections forget it, its jobs are cancelled, then the replica drops its views
        errors = await clear_remote(
            runtime,
            self.plan,
            self.id,
            [participant_id],
            close=False,
            source=self._hosting.name,
            log=self._log,
        )
        if errors:
            raise errors[0]

    async def close(self) -> None:
        """Drop later topic updates, exchanges and history, and forget all context after
        cancelling compaction jobs. Idempotent. Close it before the shared model client."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        self._replica.closed = True
        await self._hosting.started()
        runtime = self._hosting.runtime
        if runtime is not None and runtime.running:
            for error in await clear_remote(
                runtime,
                self.plan,
                self.id,
                list(self._replicas),
                close=self.deployment == "local",
                source=self._hosting.name,
                log=self._log,
            ):
                self._log.warning("context.close_incomplete", error=repr(error))
        self._replica.close()
        await self._hosting.stop()
        if self.store is not None and self.store.open:
            self.store.delete_all()  # close() leaves no row, even of participants never loaded here
            if not self._hosting.running:
                self.store.close()  # not running: no host closes it

    # --- serialization and manual compaction (docs/tools.md) ---------------------------------

    async def _running_runtime(self, operation: str) -> AgentRuntime:
        if self._replica.closed:
            raise RuntimeError(f"{operation}: the ContextManager is closed")
        return await self._hosting.ready(operation)

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
        return await dump_context(runtime, self.plan, participant_id, source=self._hosting.name)

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
        return await load_context(dump, self.plan, self.id, self._replica, self._writes, self._log)

    async def compact(self, participant_id: str, section: str | None = None) -> CompactOutcome:
        """Compact a participant's context now, whatever the half-budget trigger says.

        ``section``: ``"dialogue"`` or a configured incremental topic; None: the dialogue
        and every incremental topic (a summary topic is never compacted). Per section:
        COMPACTED (the entries are in the summary, ``made_by`` the model and/or extractive
        fallback), NOTHING_TO_CONDENSE or SUMMARIZE_FAILED (it failed; the entries stay).
        """
        _check_participant(participant_id)
        targets = compact_targets(self.plan, section)
        runtime = await self._running_runtime("compact")
        outcome = await compact_context(
            runtime,
            self.plan,
            self.id,
            self._writes,
            participant_id,
            targets,
            source=self._hosting.name,
        )
        await self.synced()
        return outcome
