"""Joining a voice renderer's playback stages to the router's turn records.

A voice renderer runs in another process and finishes playing a reply after the router
ended its turn, so the router cannot know the playback stages when the turn ends. A router
with a playback topic (a box with a renderer) hands each turn's record, when it is
complete but for playback, to ``PlaybackJoin.hold``; the renderer sends one small
``PlaybackStages`` per reply it played (``report``), and the record is emitted with them
then, or without them ``wait_s`` after the turn ended (a turn nothing was played for: a
renderer that is down, a reply superseded before it played). A report that comes before
its turn ended is kept until it does.

Bounded: at most ``capacity`` records wait and ``capacity`` early reports are kept; the
oldest is emitted without playback (or dropped, for a report), and counted (``evicted``).
``close`` emits every waiting record (the router is stopping). Runs on the router's loop:
one timer per waiting turn, nothing per chunk.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable

from xrmq.schemas import PlaybackStages

PLAYBACK_WAIT_S = 30.0
"""How long a turn's record waits for the renderer's playback stages after the turn ended:
longer than a spoken reply lasts."""
DEFAULT_CAPACITY = 1024

Emit = Callable[[PlaybackStages | None, str | None], None]
"""Emits a held record with the playback stages (and the renderer's runtime name), or
without (None, None)."""


class PlaybackJoin:
    """Holds turn records until their playback stages arrive (see the module docstring)."""

    def __init__(self, wait_s: float = PLAYBACK_WAIT_S, capacity: int = DEFAULT_CAPACITY) -> None:
        if wait_s < 0:
            raise ValueError("PlaybackJoin.wait_s: must be >= 0")
        if capacity < 1:
            raise ValueError("PlaybackJoin.capacity: must be >= 1")
        self.wait_s = wait_s
        self.capacity = capacity
        self._waiting: OrderedDict[str, tuple[Emit, asyncio.TimerHandle]] = OrderedDict()
        self._early: OrderedDict[str, tuple[PlaybackStages, str | None]] = OrderedDict()
        self.evicted = 0
        """Records emitted without waiting their time, and early reports dropped, to stay
        within ``capacity``."""
        self.timed_out = 0
        """Records emitted without playback stages because none came in ``wait_s``."""

    def __len__(self) -> int:
        return len(self._waiting)

    def hold(self, turn_id: str, emit: Emit) -> None:
        """Emit the turn's record with its playback stages: now if they came already, else
        when they come, or without them after ``wait_s``."""
        early = self._early.pop(turn_id, None)
        if early is not None:
            emit(*early)
            return
        if turn_id in self._waiting:
            self._emit(turn_id, None, None)
        while len(self._waiting) >= self.capacity:
            oldest = next(iter(self._waiting))
            self.evicted += 1
            self._emit(oldest, None, None)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a direct call outside the runtime): do not wait
            emit(None, None)
            return
        self._waiting[turn_id] = (emit, loop.call_later(self.wait_s, self._expire, turn_id))

    def report(self, stages: PlaybackStages, renderer: str | None) -> None:
        """A renderer's stages for one turn: emit its waiting record, or keep them until the
        turn ends."""
        if stages.turn_id in self._waiting:
            self._emit(stages.turn_id, stages, renderer)
            return
        self._early[stages.turn_id] = (stages, renderer)
        self._early.move_to_end(stages.turn_id)
        while len(self._early) > self.capacity:
            self._early.popitem(last=False)
            self.evicted += 1

    def close(self) -> None:
        """Emit every waiting record now, without playback stages."""
        for turn_id in list(self._waiting):
            self._emit(turn_id, None, None)
        self._early.clear()

    def _expire(self, turn_id: str) -> None:
        if turn_id in self._waiting:
            self.timed_out += 1
            self._emit(turn_id, None, None)

    def _emit(self, turn_id: str, stages: PlaybackStages | None, renderer: str | None) -> None:
        emit, timer = self._waiting.pop(turn_id)
        timer.cancel()
        emit(stages, renderer)
