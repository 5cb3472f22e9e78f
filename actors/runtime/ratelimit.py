"""Aggregated warnings: a flood of one kind of warning is one log line per interval, with a count.

A bus peer can make a receiver warn once per frame (rejected, oversize, overflow, gap,
stale); logging each would turn a flood of bad frames into a flood of log lines. Each
(event, topic, sender) logs its first occurrence at once, with its details; later ones
within ``interval_s`` are only counted, and when the interval is over the next
occurrence (or ``flush``) logs one ``<event>.repeated`` line with the count of those
that were not logged. Counters in ``RuntimeMetrics`` still count every single one.

The table of (event, topic, sender) is bounded (``capacity``): beyond it, warnings are
aggregated under the event alone (topic and sender ``*``), so a flood from many fake
senders cannot grow it either.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

DEFAULT_INTERVAL_S = 10.0
DEFAULT_CAPACITY = 1024


class AggregatedWarnings:
    """Rate-limits warnings per (event, topic, sender); see the module docstring."""

    __slots__ = ("_clock", "_log", "_windows", "capacity", "interval_s")

    def __init__(
        self,
        log: structlog.typing.FilteringBoundLogger,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        capacity: int = DEFAULT_CAPACITY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self.interval_s = interval_s
        self.capacity = capacity
        self._clock = clock
        # (event, topic, sender) -> [window start, occurrences not logged]
        self._windows: dict[tuple[str, str, str], list[float]] = {}

    def __len__(self) -> int:
        return len(self._windows)

    def warn(
        self,
        event: str,
        topic: str | None,
        sender: str | None,
        *,
        level: str = "warning",
        **fields: Any,
    ) -> None:
        """Log ``event`` (at ``level``) now if it is the first of its (event, topic, sender) in
        this interval, else count it."""
        key = (event, topic or "", sender or "")
        now = self._clock()
        window = self._windows.get(key)
        if window is None:
            if len(self._windows) >= self.capacity:
                key = (event, "*", "*")
                window = self._windows.get(key)
            if window is None:
                self._windows[key] = [now, 0]
                getattr(self._log, level)(event, topic=topic, sender=sender, **fields)
                return
        if now - window[0] < self.interval_s:
            window[1] += 1
            return
        self._emit(key, window)
        window[0], window[1] = now, 0
        getattr(self._log, level)(event, topic=topic, sender=sender, **fields)

    def flush(self) -> None:
        """Log the counts of every interval that is over; forget those (event, topic, sender)."""
        now = self._clock()
        for key, window in list(self._windows.items()):
            if now - window[0] >= self.interval_s:
                self._emit(key, window)
                del self._windows[key]

    def flush_all(self) -> None:
        """Log every pending count now (at stop)."""
        for key, window in self._windows.items():
            self._emit(key, window)
        self._windows.clear()

    def _emit(self, key: tuple[str, str, str], window: list[float]) -> None:
        if window[1]:
            event, topic, sender = key
            self._log.warning(
                f"{event}.repeated",
                topic=topic,
                sender=sender,
                count=int(window[1]),
                interval_s=self.interval_s,
            )
