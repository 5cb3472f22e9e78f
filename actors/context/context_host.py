"""``ContextHost``: one section host (process, shard), its recovery and its snapshots.

A context process hosts the section actors of one shard (``sections.register_sections``)
and one ``ContextHost`` beside them. With a journal it restores the journal before the
runtime reports ready: each participant's state, re-issuing its pending compaction and
publishing its views under the new epoch; then it announces ``HostStarted``, so a
replica that sees it knows what this host holds. It answers every replica's request
for a full snapshot (and a dump's) in pages within the message limit, so a snapshot of
many participants never needs one message larger than the bus allows.

Dialogues are per-participant actors. A context process opens its journal with every
section read on demand, so a restart reads only the participants' ids and the states
with a pending compaction (re-issued): its time does not grow with participants who are
not active. A dialogue actor is spawned by its participant's first message and starts
from the journal; it is retired again once idle for ``retire_idle_s``, and the runtime
retires the least recently used beyond its ``keyed_instances`` bound. This host keeps
track of the participants whose dialogue the journal alone holds (``dialogues_held``),
so snapshots and dumps read them and the participant's next message starts from them.
Without a journal a dialogue actor never retires idle, and one retired over the bound
loses its dialogue: counted (``context.dialogues_lost``) and logged, so memory stays
bounded and nothing is lost without a count. The journal is read through in the
background once (``check_journal``, the first page before ready), so a row that cannot
be read is quarantined at start, not when its participant comes back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import msgspec

from xrmq.actors.runtime import (
    DEFERRED_REPLY,
    Agent,
    Handler,
    Handlers,
    RuntimeContext,
    get_logger,
    shard_of,
)
from xrmq.actors.runtime.ratelimit import AggregatedWarnings
from xrmq.topics import Topic

from .dump import ParticipantDump, SectionDump, export_section
from .journal import ContextStore, journal_name
from .journal_rows import Recovered
from .messages import ClearSection, HostDump, HostStarted, HostSync, HostViews, SectionView
from .plan import ContextPlan
from .section_actors import DialogueSectionActor, TopicSectionActor
from .section_host import SectionHost
from .shard_migration import DialogueMigration

T = TypeVar("T")

CHECK_PAGE = 1024
"""Sections the background read of a journal (``check_journal``) reads at a time; the
first page is read before the host reports ready."""
PAGE_PREFETCH = 512
"""Participants whose retired sections a snapshot page reads from the journal at once."""
PAGE_OVERHEAD_BYTES = 64
"""A page's bytes besides its items and cursor (``HostViews``' host and epoch, framing)."""
_page_encoder = msgspec.msgpack.Encoder()


class ContextHost(Agent):
    """One section host (process, shard): its journal, recovery and full snapshots.

    At start (before the runtime reports ready) it spawns the dialogue actor of every
    participant its journal holds, with the recovered state, and has every section
    re-issue pending compactions and publish its views under this runtime's epoch;
    then it publishes ``HostStarted``. It answers ``HostSync`` asks with the views it
    holds (a replica's resync, or one participant's fetch) or the states as a dump
    (``ContextManager.dump``): a snapshot in pages within the message limit, in
    participant name order, each participant whole in one page.

    Dialogues its journals hold of participants another shard owns (the shard count
    changed), and every dialogue of ``orphans`` (journals of shards that no longer
    exist), are migrated to their owners once ready (``shard_migration``): ``migrated``
    counts them, ``migrating`` what is still to send.
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
        self.migration = DialogueMigration(self, plan, list(orphans))
        dialogue = journal_name(plan.config.dialogue)
        self.recovered: dict[str, Recovered] = {}
        """Dialogue states waiting for their actor (spawned at start)."""
        for journal in [store, *orphans] if store is not None else orphans:
            for (pid, name), item in journal.recovered.items():
                if name != dialogue:
                    continue
                if journal is store and shard_of(pid, shards) == index:
                    self.recovered[pid] = item
                else:
                    self.migration.foreign[id(journal), pid] = (journal, pid, item)
        self.dialogues_held: set[str] = set(self.recovered) if store is not None else set()
        """With a journal, the participants of this shard whose dialogue has a state,
        whether its actor is live or was retired (idle, or over the runtime's
        ``keyed_instances`` bound) or never spawned since the journal was opened (read on
        demand): then the journal alone holds it (``take``, and the snapshots read it)."""
        if store is not None:
            self._adopt_journal(store, dialogue, shards)
        self.dialogues_lost = 0
        """Without a journal, dialogues dropped with their actor (retired over the
        runtime's ``keyed_instances`` bound): memory stays bounded, and the loss counted."""
        self._losses = AggregatedWarnings(get_logger(actor=f"context.host.{index}"))
        self._checking: asyncio.Task[None] | None = None
        self.checked = asyncio.Event()
        """Set once the whole journal was read through (``check_journal``)."""
        self._dialogue_reader = SectionHost(
            self, plan.config.dialogue, plan, plan.topics.dialogue_result, host=index
        )
        """Renders a retired dialogue read from the journal (it holds no state)."""
        self._prefetched: dict[str, Recovered] = {}
        """Retired dialogues read for the snapshot page being built (``_prefetch``)."""
        t = plan.topics
        self._handlers: dict[Topic, Handler] = {
            t.host_sync(index): self.on_sync,
            t.host_dump(index): self.on_dump,
            t.dialogue_clear: self.on_clear,
        }

    def _adopt_journal(self, store: ContextStore, dialogue: str, shards: int) -> None:
        """Hold every dialogue the journal has and did not read at opening (``open_store``'s
        ``on_demand_prefix``): this shard's by id alone, read when first used; other
        shards' (the shard count changed) read now, to migrate."""
        foreign: list[str] = []
        for pid in store.section_participants(dialogue):
            if pid in self.recovered or (id(store), pid) in self.migration.foreign:
                continue
            if shard_of(pid, shards) == self.index:
                self.dialogues_held.add(pid)
            else:
                foreign.append(pid)
        for pid, item in store.read_sections(dialogue, foreign).items():
            self.migration.foreign[id(store), pid] = (store, pid, item)

    def dialogue_lost(self, participant_id: str) -> None:
        """Count and log (rate-limited) a dialogue dropped with its actor, without a journal."""
        self.dialogues_lost += 1
        self._losses.warn(
            "context.dialogue_lost",
            None,
            None,
            participant=participant_id,
            lost=self.dialogues_lost,
            reason="dialogue actor retired over the runtime's keyed_instances bound, "
            "without a journal ([context] persist) to keep it",
        )

    async def check_journal(self, first: asyncio.Future[None] | None = None) -> None:
        """Read the whole journal through, ``CHECK_PAGE`` sections at a time, keeping
        nothing: a row that cannot be read is quarantined (counted, logged) now, not when
        its participant is next used, so ``context.journal_quarantined`` soon tells what a
        damaged journal cost. ``first`` is set after the first page."""
        store = self.store
        try:
            if store is not None:
                after = await store.check(None, CHECK_PAGE)
                if first is not None:
                    first.set_result(None)
                    first = None
                while after is not None:
                    after = await store.check(after, CHECK_PAGE)
            self.checked.set()
        except Exception as error:  # a journal that fails reading fails its writes loudly too
            get_logger(actor=self.name).error("context.journal_check_failed", error=repr(error))
        finally:
            if first is not None and not first.done():
                first.set_result(None)

    async def on_clear(self, message: ClearSection, ctx: RuntimeContext) -> object:
        """Drop the waiting dialogue of a cleared participant (all for a global clear);
        never answers: the dialogue actor that owns the participant does."""
        pid = ctx.participant_id
        section = journal_name(self._plan.config.dialogue)
        self.migration.drop(pid)
        if pid is None and self.store is not None:  # retired dialogues have no actor to ask
            live = {agent.key for agent in self._dialogues()}
            retired = [p for p in self.dialogues_held if p not in live]
            self.store.delete_many(retired, section)  # one transaction, however many
            self.dialogues_held.difference_update(retired)
        return DEFERRED_REPLY

    async def migration_finished(self) -> None:
        """Return once every foreign dialogue is migrated (at once when there is none)."""
        await self.migration.finished()

    @property
    def migrated(self) -> int:
        """Dialogues migrated to the shard that owns them now."""
        return self.migration.migrated

    @property
    def migrating(self) -> int:
        """Dialogues of other shards' participants still to migrate."""
        return len(self.migration.foreign)

    def gauges(self) -> dict[str, float]:
        """Migrations (see the class docstring), and the journal rows that could not be
        read and were quarantined when this host's journals were opened
        (``ContextStore.quarantined``)."""
        orphans = self.migration.orphans
        journals = [self.store, *orphans] if self.store is not None else orphans
        return {
            "context.migrated": float(self.migrated),
            "context.migrating": float(self.migrating),
            "context.journal_quarantined": float(sum(j.quarantined for j in journals)),
            "context.dialogues_lost": float(self.dialogues_lost),
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
        prefetched = self._prefetched.get(participant_id)
        if prefetched is not None:
            return prefetched
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
        if self.store is not None and self._checking is None:  # a journal's first page
            first = asyncio.get_running_loop().create_future()  # before ready: a small
            self._checking = asyncio.create_task(self.check_journal(first))  # one is whole
            await first
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
        self.migration.start(self.index)

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
                    chunk = remaining[index : index + PAGE_PREFETCH]
                    self._prefetch([pid for pid in chunk if pid not in dialogues])
                    for topic in self.topics:
                        topic.host.residency.prefetch(chunk)
                own = items_of(pid)
                cost = sum(len(_page_encoder.encode(item)) for item in own)
                cursor = len(_page_encoder.encode(pid))
                if items and size + cost + cursor > limit:
                    return items, remaining[index - 1]
                items.extend(own)
                size += cost
            return items, None
        finally:
            self._prefetched = {}
            for topic in self.topics:
                topic.host.residency.forget_prefetched()

    def _prefetch(self, participant_ids: list[str]) -> None:
        """Read the held dialogues among ``participant_ids`` whose actor is not live from
        the journal in one go, for the snapshot page being built (after handing it what
        retired actors still had scheduled)."""
        wanted = [pid for pid in participant_ids if pid in self.dialogues_held]
        if not wanted or self.store is None:
            self._prefetched = {}
            return
        self.store.flush()
        self._prefetched = self.store.read_sections(
            journal_name(self._plan.config.dialogue), wanted
        )

    async def on_stop(self) -> None:
        if self._checking is not None:
            self._checking.cancel()
        await self.migration.stop()
        if self.store is not None:
            self.store.close()
