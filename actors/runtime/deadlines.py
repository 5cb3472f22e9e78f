"""Ask timeouts: one event-loop timer for every pending ask.

An asyncio timer per ask costs 1.7 us to schedule and cancel (a ``TimerHandle``, a
heap push, a cancellation the loop has to sweep later), on the round trip of every
ask. Here an ask's deadline is one tuple pushed on a heap, and nothing is done when
the ask is answered: the single timer, set for the earliest deadline, skips futures
that are already done when it fires. Answered entries are pruned from the heap once
they outnumber the live ones, so memory stays proportional to the asks in flight.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Any

_MIN_PRUNE = 1024
_CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution
"""asyncio runs a timer up to this early; a deadline that close counts as passed."""


class AskDeadlines:
    """Fails each registered future with ``TimeoutError`` when its deadline passes."""

    __slots__ = ("_heap", "_loop", "_order", "_prune_at", "_timer", "_timer_at")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, asyncio.Future[Any], str, float]] = []
        self._order = itertools.count()  # ties on the deadline never compare futures
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._prune_at = _MIN_PRUNE

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, future: asyncio.Future[Any], timeout: float, topic_name: str) -> None:
        """Fail ``future`` if it is still pending ``timeout`` seconds from now."""
        deadline = self._loop.time() + timeout
        heapq.heappush(self._heap, (deadline, next(self._order), future, topic_name, timeout))
        if deadline < self._timer_at:
            self._arm(deadline)
        if len(self._heap) >= self._prune_at:
            self._prune()

    def close(self) -> None:
        """Stop the timer; the futures are left to their owner."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, float("inf")
        self._heap.clear()

    def _arm(self, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(deadline, self._expire_due)
        self._timer_at = deadline

    def _expire_due(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        heap, now = self._heap, self._loop.time() + _CLOCK_RESOLUTION
        while heap and heap[0][0] <= now:
            _, _, future, topic_name, timeout = heapq.heappop(heap)
            if not future.done():
                future.set_exception(
                    TimeoutError(f"ask: no reply on {topic_name!r} within {timeout}s")
                )
        while heap and heap[0][2].done():
            heapq.heappop(heap)
        if heap:
            self._arm(heap[0][0])

    def _prune(self) -> None:
        self._heap = [entry for entry in self._heap if not entry[2].done()]
        heapq.heapify(self._heap)
        self._prune_at = max(_MIN_PRUNE, 2 * len(self._heap))
        if not self._heap and self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, float("inf")
