"""Make before break: the standby session a rollover switches to.

Why: a rollover that connects after the boundary puts the provider's connect (about
1.1 s) in front of the next turn, and a short utterance ("yes", "stop") does not hide it.
So once a checkpoint is ready and the pressure passes ``prepare_at``, the next session is
opened in the background and seeded with the checkpoint while the current one keeps
serving; at the boundary the rollover only routes input to it (``take``): no connect on
the critical path. ``RealtimeSession`` owns a ``Standby`` and calls it under its lock.

Contract:

* ``prepare()`` opens the standby (at most one; the checkpoint in progress is awaited
  first, one is started if none was committed). Seeded with the checkpoint's summary and
  the completed messages after it (``StandbyMirror``); every message completed on the
  current session afterwards, while it connected and while it waits, is added in order
  (``sync``: ``conversation.item.create``), so at the switch it holds summary + tail +
  everything since the snapshot.
* Honest about the provider: one whose ``max_concurrent_sessions`` is below 2 gets no
  standby; its rollovers take today's path (buffer, reconnect, replay), logged and
  counted (``standby_fallbacks``), as does any rollover whose boundary comes before a
  standby is ready.
* A standby that fails to connect, drops while it waits, nears the provider's idle limit
  (``standby_idle_s``, reopened at ``IDLE_SHARE`` of it) or holds a message that changed
  since (a barge-in truncated it: the snapshot's past is no longer the transcript's) is
  discarded and reopened, up to ``attempts`` opens per rollover; then abandoned
  (``standby_abandoned``) for today's path. Every case is counted and logged.
* Before the switch, the standby's events are its own (a drop, an error); from the
  switch, they are the session's, under the epoch the switch gave it (``forward``).

``state`` is one of ``STATES``; ``last_switch_s`` is how long the last switch took.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Literal

import structlog

from .background import SessionWork
from .checkpoint import Checkpointer
from .mirror import StandbyMirror
from .provider import (
    Disconnected,
    ProviderError,
    RealtimeConnectError,
    RealtimeConnection,
    RealtimeEvent,
    RealtimeProvider,
    SeedItem,
    SessionSeed,
)
from .rollover import Phase, RolloverMachine

State = Literal["unsupported", "idle", "connecting", "ready", "abandoned", "closed"]
STATES: tuple[State, ...] = ("unsupported", "idle", "connecting", "ready", "abandoned", "closed")
"""A standby's states; its gauge is the index (``xrmq top`` names it)."""
IDLE_SHARE = 0.8
"""A waiting standby is reopened at this share of the provider's idle limit."""


@dataclass(slots=True)
class Slot:
    """One standby connection: its seed, what it holds, the epoch the switch gave it."""

    seed: SessionSeed
    mirror: StandbyMirror
    connection: RealtimeConnection | None = None
    connected_at: float = 0.0
    epoch: int | None = None


class Standby:
    """See the module docstring."""

    def __init__(
        self,
        provider: RealtimeProvider,
        *,
        machine: RolloverMachine,
        work: SessionWork,
        lock: asyncio.Lock,
        log: structlog.typing.FilteringBoundLogger,
        clock: Callable[[], float],
        checkpointer: Callable[[], Checkpointer],
        make_seed: Callable[[], SessionSeed],
        forward: Callable[[int, RealtimeEvent], Awaitable[None]],
        attempts: int = 3,
    ) -> None:
        self.provider = provider
        self.machine = machine
        self.counts = machine.counts
        self.work = work
        self.log = log
        self.attempts = attempts
        self.supported = provider.max_concurrent_sessions >= 2
        self.state: State = "idle" if self.supported else "unsupported"
        self.last_switch_s: float | None = None
        self._lock = lock
        self._clock = clock
        self._checkpointer = checkpointer
        self._make_seed = make_seed
        self._forward = forward
        self._slot: Slot | None = None
        self._opens = 0

    @property
    def seeded(self) -> bool:
        """The standby being opened or waiting was seeded: later messages are added to it."""
        return self._slot is not None

    # -- the session's calls, under its lock -------------------------------------------

    def prepare(self) -> None:
        """The pressure passed ``prepare_at``: open the standby unless one is open (or
        the provider cannot, or it was abandoned for this rollover)."""
        machine = self.machine
        if self.state != "idle" or machine.phase is not Phase.STREAMING:
            return
        if machine.policy != "proactive":
            return
        self._open()

    async def sync(self) -> None:
        """Add to the ready standby the messages completed since it was seeded, in order;
        discard it if a message it holds changed."""
        slot = self._slot
        if self.state != "ready" or slot is None or slot.connection is None:
            return
        checkpointer = self._checkpointer()
        messages = checkpointer.transcript.messages
        latest = checkpointer.latest
        if slot.mirror.changed(messages, latest.summarized_through if latest else 0):
            self.counts["standby_invalidated"] += 1
            self.log.info("realtime.standby_invalidated", held=len(slot.mirror.held))
            self._lost("invalidated")
            return
        new, through = slot.mirror.pending(messages)
        try:
            for message in new:
                await slot.connection.add_item(message.role, message.text)
        except Exception as error:  # the standby died: reopened (its Disconnected is its own)
            self.counts["standby_send_failures"] += 1
            self.log.warning("realtime.standby_send_failed", error=repr(error))
            self._lost("send_failed")
            return
        slot.mirror.added(new, through)
        self.counts["standby_items_added"] += len(new)

    async def take(self, epoch: int) -> Slot | None:
        """At the boundary: the ready standby, brought up to date, now session ``epoch``
        (its events the session's from here); None if there is none ready."""
        await self.sync()
        slot = self._slot
        if self.state != "ready" or slot is None or slot.connection is None:
            return None
        slot.epoch = epoch
        self._slot = None
        self._opens = 0
        self.state = "idle"
        self.counts["standby_switches"] += 1
        return slot

    def fallback(self) -> None:
        """A rollover takes today's path (buffer, reconnect, replay): say why, count it,
        and drop a standby still connecting (the new session is connected anew)."""
        reason = (
            f"the provider allows {self.provider.max_concurrent_sessions} session at once"
            if not self.supported
            else f"standby {self.state}"
        )
        self.counts["standby_fallbacks"] += 1
        self.log.info("realtime.standby_fallback", reason=reason)
        if self.supported and self.state != "closed":
            self._discard()
            self._opens = 0
            self.state = "idle"

    async def close(self) -> None:
        """The session is closing: the standby goes too (nothing of it seeds anything)."""
        slot, self._slot = self._slot, None
        self.state = "closed"
        self.machine.standby_ready = False
        if slot is not None and slot.connection is not None and slot.epoch is None:
            await slot.connection.close()

    # -- its own work ------------------------------------------------------------------

    def _open(self) -> None:
        self._opens += 1
        self.counts["standby_opens"] += 1
        self.state = "connecting"
        checkpointer = self._checkpointer()
        if checkpointer.latest is None:
            self.work.checkpoint(checkpointer)
        self.work.spawn(self._connect())

    async def _connect(self) -> None:
        await self.work.checkpointed()
        async with self._lock:
            if self.state != "connecting" or self._slot is not None:
                return
            mirror = StandbyMirror.seed(self._checkpointer())
            items = tuple(SeedItem(message.role, message.text) for message in mirror.held)
            seed = replace(self._make_seed(), items=items)  # exactly what the mirror holds
            slot = self._slot = Slot(seed, mirror)
        await self.work.notify()
        try:
            connection = await self.provider.connect(slot.seed)
        except RealtimeConnectError as error:
            async with self._lock:
                if slot is self._slot:
                    self.counts["standby_connect_failures"] += 1
                    self.log.warning("realtime.standby_connect_failed", error=str(error))
                    self._lost("connect_failed")
            await self.work.notify()
            return
        async with self._lock:
            if slot is not self._slot:  # discarded meanwhile (a fallback, the session closed)
                self.work.spawn(connection.close())
                return
            slot.connection, slot.connected_at = connection, self._clock()
            self.state = "ready"
            self.machine.standby_ready = True
            self.counts["standby_ready"] += 1
            self.work.spawn(self._pump(slot))
            idle_s = self.provider.standby_idle_s
            if idle_s is not None:
                self.work.spawn(self._expire(slot, idle_s * IDLE_SHARE))
            self.log.info("realtime.standby_ready", seeded=len(slot.mirror.held), opens=self._opens)
            await self.sync()
        await self.work.notify()

    async def _pump(self, slot: Slot) -> None:
        assert slot.connection is not None
        async for event in slot.connection.events():
            async with self._lock:
                epoch = slot.epoch
                if epoch is None:
                    self._before_switch(slot, event)
            if epoch is None:
                await self.work.notify()
            else:
                await self._forward(epoch, event)

    def _before_switch(self, slot: Slot, event: RealtimeEvent) -> None:
        if slot is not self._slot:
            return  # a discarded standby's last words
        if isinstance(event, Disconnected) and not event.by_client:
            self.counts["standby_dropped"] += 1
            self.log.warning("realtime.standby_dropped", reason=event.reason)
            self._lost("dropped")
        elif isinstance(event, ProviderError):
            self.counts["standby_errors"] += 1
            self.log.warning("realtime.standby_error", code=event.code, message=event.message)

    async def _expire(self, slot: Slot, after_s: float) -> None:
        await asyncio.sleep(after_s)
        async with self._lock:
            if slot is not self._slot or slot.epoch is not None:
                return
            self.counts["standby_expired"] += 1
            self.log.info("realtime.standby_expired", idle_s=round(after_s, 3))
            self._lost("expired")
        await self.work.notify()

    def _lost(self, reason: str) -> None:
        """The standby is gone: reopen it while attempts remain, else abandon it."""
        self._discard()
        if self.state == "closed":
            return
        if self._opens < self.attempts and self.machine.phase is Phase.STREAMING:
            self.counts["standby_reopens"] += 1
            self.log.info("realtime.standby_reopen", reason=reason, opens=self._opens)
            self._open()
            return
        self.state = "abandoned"
        self.counts["standby_abandoned"] += 1
        self.log.warning("realtime.standby_abandoned", reason=reason, opens=self._opens)

    def _discard(self) -> None:
        slot, self._slot = self._slot, None
        self.machine.standby_ready = False
        if slot is not None and slot.connection is not None:
            self.work.spawn(slot.connection.close())
