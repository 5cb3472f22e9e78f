"""Per-stream sequence tracking: every lost message is reported as a gap.

Delivery on the bus is at-most-once per hop; this makes loss observable. A stream is
one (wire key, sender): a publisher numbers the messages it sends under each key
(topic plus participant) from 1, so a subscriber filtering one participant at the
socket still sees a contiguous sequence. A new epoch (the sender restarted) starts
the stream again. The first message seen on a stream sets its baseline.
"""

from __future__ import annotations

import msgspec


class Gap(msgspec.Struct, frozen=True):
    """Messages ``first_missing..last_missing`` (inclusive) of one stream never arrived."""

    topic: str
    participant_id: str | None
    sender: str
    epoch: int
    first_missing: int
    last_missing: int

    @property
    def count(self) -> int:
        return self.last_missing - self.first_missing + 1


IN_ORDER = 0
GAP = 1
STALE = 2
"""A duplicate, a reordered message, or one from an older epoch: dropped and counted."""


class SequenceTracker:
    """Remembers the last (epoch, seq) of each stream and classifies each arrival."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[tuple[bytes, str], tuple[int, int]] = {}

    def observe(self, key: bytes, sender: str, epoch: int, seq: int) -> tuple[int, int]:
        """Record an arrival; return (IN_ORDER | GAP | STALE, first missing seq for a GAP)."""
        stream = (key, sender)
        last = self._last.get(stream)
        if last is None or epoch > last[0]:
            self._last[stream] = (epoch, seq)
            return IN_ORDER, 0
        last_epoch, last_seq = last
        if epoch < last_epoch or seq <= last_seq:
            return STALE, 0
        self._last[stream] = (epoch, seq)
        if seq == last_seq + 1:
            return IN_ORDER, 0
        return GAP, last_seq + 1

    def forget_sender(self, sender: str) -> None:
        """Drop every stream of ``sender`` (it stopped for good)."""
        for stream in [s for s in self._last if s[1] == sender]:
            del self._last[stream]
