"""The section actors: the dialogue of one participant, and one configured context topic.

Both are thin shells around a ``section_host.SectionHost``: their handlers turn the
bus messages (exchanges recorded, topic updates and writes, loads, manual compactions,
compaction results, clears) into the host's changes, and never await while changing
state, so every change is atomic on the event loop. A dialogue actor is a keyed actor
per participant, spawned on its first message; a topic actor holds every participant
of its topic, whose name is its mailbox.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from xrmq.actors.runtime import Agent, Handler, Handlers, RuntimeContext, get_logger
from xrmq.actors.runtime.ratelimit import AggregatedWarnings
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import Topic

from .engine import Section
from .journal import ContextStore
from .journal_rows import Recovered
from .messages import (
    Cleared,
    ClearSection,
    CompactionDone,
    CompactSection,
    LoadSection,
    RecordExchanges,
    TopicWrite,
)
from .plan import ContextPlan
from .section_host import SectionHost
from .state import SectionState


class DialogueSectionActor(Agent):
    """The dialogue section of one participant (a keyed actor, spawned on first message).

    After a clear it holds nothing, and it retires itself once its mailbox is idle, so
    a departed participant leaves no actor behind. With a journal it also retires
    itself once unused for ``retire_idle_s`` with nothing the journal does not hold
    (``retire_if_idle``, looked at every ``retire_idle_s / 4``, at most a minute), and
    the runtime keeps at most its ``keyed_instances`` of these actors (least recently
    used retired first): a retired one's state is in the journal alone, and the actor
    spawned by the participant's next message starts from it (``ContextHost.take``),
    re-issuing a pending compaction. Without a journal it never retires idle, and one
    retired over the bound drops its dialogue, counted by ``lost``.
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
        held: set[str] | None = None,
        lost: Callable[[str], None] | None = None,
    ) -> None:
        self.key = participant_id
        self.kind = kind
        self._plan = plan
        self._store = store
        self._lost = lost
        """Told of a dialogue dropped with this actor (without a journal)."""
        self._idle_timer: asyncio.TimerHandle | None = None
        self._held_by = held
        """The participants whose dialogue has a state (``ContextHost.dialogues_held``)."""
        self._resumed = recovered is None
        self.host = SectionHost(
            self, plan.config.dialogue, plan, plan.topics.dialogue_result, store=store, host=host
        )
        if recovered is not None:
            self.host.restore(participant_id, recovered)
        self._retiring: asyncio.Task[None] | None = None
        """The retirement after a clear: held, as the loop keeps only weak references to tasks."""
        self.retracted = 0
        """Exchanges taken back (``RecordExchanges.retracted``)."""
        self.retracts_unknown = 0
        """Retractions that found no uncompacted exchange with their identity: counted,
        logged (aggregated), and otherwise nothing."""
        self._unknown_warnings: AggregatedWarnings | None = None

    def gauges(self) -> dict[str, float]:
        return {
            **self.host.gauges(),
            "context.participants": len(self.host.participants),
            "context.exchanges_retracted": self.retracted,
            "context.retracts_unknown": self.retracts_unknown,
        }

    def resume(self) -> None:
        """Once, for a state from the journal: re-issue its pending compaction and
        publish its view (``SectionHost.resume``)."""
        if not self._resumed:
            self._resumed = True
            self.host.resume()

    def _held(self) -> None:
        if self._held_by is not None and self.host.participants:
            self._held_by.add(self.key)

    async def on_start(self) -> None:
        self.resume()
        if self._store is not None:
            self._arm_idle_timer()

    def _arm_idle_timer(self) -> None:
        every = min(60.0, self._plan.retire_idle_s / 4)
        self._idle_timer = asyncio.get_running_loop().call_later(every, self._idle_tick)

    def _idle_tick(self) -> None:
        self._retiring = asyncio.create_task(self._retire_idle())

    async def _retire_idle(self) -> None:
        await self.retire_if_idle()

    async def retire_if_idle(self) -> bool:
        """Retire this actor if its participant was unused for ``retire_idle_s`` and the
        journal holds its state as memory does (nothing unsaved, no compaction out, no
        message queued or handled): True if it did; else look again later."""
        runtime = self.runtime
        store = self._store
        record = self.host.participants.get(self.key)
        if runtime is None or not runtime.running or runtime.stopping or store is None:
            return False
        if (
            record is not None
            and not store.writing
            and time.monotonic() - record.used >= self._plan.retire_idle_s
            and self.host.residency.retirable(self.key, record)
            and await runtime.retire(self.kind, self.key, idle_only=True)
        ):
            return True
        if self._idle_timer is not None:
            self._arm_idle_timer()
        return False

    async def on_write(self, message: RecordExchanges, ctx: RuntimeContext) -> None:
        section = self.host.section
        added: list[bytes] = []

        unknown: list[bytes] = []

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
            for identity in message.retracted:
                if section.retract_exchange(state, identity):
                    self.retracted += 1
                else:
                    unknown.append(identity)

        self.host.write(self.key, add, ack=(message.writer, message.seq), identities=added)
        self._held()
        if unknown:
            # Idempotent: taken back already, never recorded here, or summarized.
            self.retracts_unknown += len(unknown)
            if self._unknown_warnings is None:
                self._unknown_warnings = AggregatedWarnings(get_logger(actor=self.name))
            self._unknown_warnings.warn(
                "context.retract_unknown",
                self.host.section.spec.name,
                self.key,
                identities=[identity.hex() for identity in unknown],
                reason="no uncompacted exchange has this identity",
            )

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
        if self._held_by is not None:
            self._held_by.discard(self.key)
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
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        runtime = self.runtime
        retired = runtime is not None and not runtime.stopping
        if retired and self._store is None and self.host.participants and self._lost:
            self._lost(self.key)
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
