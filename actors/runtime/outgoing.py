"""Outgoing streams: the messages one runtime sends under each wire key, numbered from 1, and
the heartbeats that announce their last seq.

A stream is a list ``[wire key, last seq, seq at the last eviction look, seq at the last
heartbeat]``: the send path looks it up once per message (``table``) and opens one only for a
new (topic, participant). The table is bounded (``capacity``, CLOCK eviction, ``tables.py``):
a retired stream that sends again restarts at seq 1, which receivers take as a fresh start.

The heartbeat (``RuntimeMetrics.last_seq``) lists the last seq of every stream that sent since
the last one, and the others in turn (``HEARTBEAT_KEYS``), so a receiver that lost a stream's
tail learns of it; a stopping runtime announces every stream it numbered (``final``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from xrmq.schemas._validation import check_positive, is_name
from xrmq.topics import topic_key

from .ratelimit import AggregatedWarnings
from .scope import GLOBAL
from .tables import evict_over

DEFAULT_OUTGOING_STREAMS = 4096
"""Outgoing streams (topic x participant, inbox x participant) one runtime numbers; CLOCK
eviction beyond (a retired stream that sends again restarts at seq 1)."""
DEFAULT_HEARTBEAT_S = 2.0
"""Without ``metrics_interval``, how often a runtime that has published announces the last seq
of its streams (a short heartbeat), so a receiver counts a lost tail within this long."""
HEARTBEAT_KEYS = 256
"""Streams a heartbeat lists beyond those that changed since the last one: all of them when
there are this few, else the next slice in turn, so every stream's last seq is announced again
and again (a receiver that lost the heartbeats of an overload still learns of the lost tail)."""
_KEY, _SEQ, _SEEN, _BEAT = range(4)

Beat = Callable[[dict[str, int], bool], object]
"""Publish one heartbeat listing these last seqs (the runtime's metrics on ``METRICS_TOPIC``)."""


class OutgoingStreams:
    """The outgoing streams of one runtime and their heartbeats; see the module docstring."""

    def __init__(
        self,
        capacity: int,
        count_eviction: Callable[[str, int], None],
        beat: Beat,
        warnings: AggregatedWarnings,
        log: structlog.typing.FilteringBoundLogger,
        *,
        metrics_interval: float | None,
        heartbeat_s: float | None,
    ) -> None:
        check_positive(capacity, "outgoing_streams")
        for field, interval in (
            ("metrics_interval", metrics_interval),
            ("heartbeat_s", heartbeat_s),
        ):
            if interval is not None and not interval > 0:
                raise ValueError(
                    f"{field}: must be a positive number of seconds or None, got {interval!r}"
                )
        self.metrics_interval = metrics_interval
        self.heartbeat_s = heartbeat_s
        self.capacity = capacity
        self.table: dict[tuple[str, str | None], list[Any]] = {}
        """By (topic name, participant): [wire key, last seq sent, ...]."""
        self._count_eviction = count_eviction
        self._beat = beat
        self._warnings = warnings
        self._log = log
        self._cursor = 0

    def open(self, name: str, participant_id: str | None) -> list[Any]:
        """A new stream for (``name``, ``participant_id``); checks the participant once."""
        if participant_id is GLOBAL:
            raise ValueError("participant_id: send() takes None for a global message, not GLOBAL")
        if participant_id is not None and not is_name(participant_id, blank=False):
            raise ValueError(
                f"participant_id: must be None or a non-empty string without NUL, "
                f"not only whitespace; got {participant_id!r}"
            )
        stream = self.table[name, participant_id] = [topic_key(name, participant_id), 0, 0, 0]
        if len(self.table) > self.capacity:
            evicted = evict_over(self.table, self.capacity, _SEQ, _SEEN)
            self._count_eviction("outgoing_streams", evicted)
        return stream

    def recent_last_seqs(self) -> dict[str, int]:
        """A heartbeat's ``last_seq``: every stream that sent since the last heartbeat, and the
        others up to ``HEARTBEAT_KEYS`` of them, in turn (see ``HEARTBEAT_KEYS``)."""
        streams = list(self.table.values())
        listed: dict[str, int] = {}
        for stream in streams:
            if stream[_SEQ] != stream[_BEAT]:
                stream[_BEAT] = stream[_SEQ]
                listed[stream[_KEY].decode()] = stream[_SEQ]
        if len(streams) <= HEARTBEAT_KEYS:
            chosen = streams
        else:
            start = self._cursor % len(streams)
            chosen = (streams[start:] + streams[:start])[:HEARTBEAT_KEYS]
            self._cursor = start + HEARTBEAT_KEYS
        for stream in chosen:
            if stream[_SEQ]:
                listed[stream[_KEY].decode()] = stream[_SEQ]
        return listed

    def start(self, runtime: str) -> asyncio.Task[None] | None:
        """The heartbeat task of a runtime that starts: its metrics every ``metrics_interval``,
        else a short heartbeat every ``heartbeat_s``, else none."""
        if self.metrics_interval:
            return asyncio.create_task(
                self.publish_metrics(self.metrics_interval), name=f"xrmq-metrics-{runtime}"
            )
        if self.heartbeat_s:
            return asyncio.create_task(
                self.publish_heartbeats(self.heartbeat_s), name=f"xrmq-heartbeat-{runtime}"
            )
        return None

    async def publish_metrics(self, interval: float) -> None:
        """With ``metrics_interval``: the metrics, a heartbeat, every ``interval`` seconds."""
        while True:
            try:
                self._beat(self.recent_last_seqs(), False)
            except Exception as error:
                self._log.error("runtime.metrics_failed", error=repr(error))
            self._warnings.flush()
            await asyncio.sleep(interval)

    async def publish_heartbeats(self, interval: float) -> None:
        """Without ``metrics_interval``: once this runtime has published, a heartbeat every
        ``interval`` announcing its streams' last seqs (``heartbeat_s``)."""
        while True:
            await asyncio.sleep(interval)
            if not self.table:
                continue  # published nothing yet: no tail to announce
            try:
                self._beat(self.recent_last_seqs(), False)
            except Exception as error:
                self._log.error("runtime.heartbeat_failed", error=repr(error))
            self._warnings.flush()

    def final(self) -> None:
        """Announce the last seq of every stream this runtime numbered (``HEARTBEAT_KEYS`` per
        heartbeat), so a receiver counts a tail lost just before this runtime stopped."""
        streams = [stream for stream in self.table.values() if stream[_SEQ]]
        for start in range(0, len(streams), HEARTBEAT_KEYS):
            listed = {s[_KEY].decode(): s[_SEQ] for s in streams[start : start + HEARTBEAT_KEYS]}
            try:
                self._beat(listed, True)
            except Exception as error:
                self._log.error("runtime.final_heartbeat_failed", error=repr(error))
                return
