"""Per-stream sequence tracking: every lost message is reported as a gap.

Delivery on the bus is at-most-once per hop; this makes loss observable. A stream is
one (wire key, sender, epoch): a publisher numbers the messages it sends under each key
(topic plus participant) from 1, so a subscriber filtering one participant at the
socket still sees a contiguous sequence. Each epoch (incarnation of the sender) is a
stream of its own, so a frame that forges a sender's name with a higher epoch opens a
stream of its own and can never make the real sender's messages look stale, before or
after the real sender restarts. The first message seen on a stream sets its baseline;
``seq`` 1 always starts the stream afresh (a sender that retired an idle stream from its
bounded table and sends on it again numbers it from 1).

A frame that copies a real sender's name and epoch with a higher ``seq`` would make
the real messages that follow look stale. So a stream whose "stale" messages arrive
in order, ``RESYNC_AFTER`` of them in a row, takes them as the real stream again (the
forged frame cost those few messages, counted as stale, and the jump is counted in
``resynced``); duplicates and reorderings are never in order like that.

The table is bounded (``capacity`` streams, CLOCK eviction, see ``tables``); an evicted
stream that is still in use sets a new baseline on its next message. Evictions are
counted in ``evicted``.
"""

from __future__ import annotations

import msgspec

from xrmq.schemas._validation import check_positive

from .tables import evict_over

DEFAULT_STREAM_CAPACITY = 16_384
"""Streams one runtime tracks: senders x keys it receives (CLOCK eviction beyond)."""


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
STALE = -1
"""A duplicate or a reordered message of one stream: dropped and counted."""

RESYNC_AFTER = 3
"""In-order "stale" messages in a row after which a stream follows them again."""

# A stream: [last seq, seq at the last eviction look, last stale seq, stale messages in order].
_SEQ, _SEEN, _STALE_SEQ, _STALE_RUN = 0, 1, 2, 3


class SequenceTracker:
    """Remembers the last seq of each stream and classifies each arrival."""

    __slots__ = ("_streams", "capacity", "evicted", "resynced")

    def __init__(self, capacity: int = DEFAULT_STREAM_CAPACITY) -> None:
        check_positive(capacity, "SequenceTracker.capacity")
        self.capacity = capacity
        self.evicted = 0
        self.resynced = 0
        # (wire key, sender, epoch) -> a stream (see _SEQ...), updated in place.
        self._streams: dict[tuple[bytes, str, int], list[int]] = {}

    def __len__(self) -> int:
        return len(self._streams)

    def observe(self, key: bytes, sender: str, epoch: int, seq: int) -> int:
        """Record an arrival: IN_ORDER (0), STALE (-1), or for a gap its first missing seq (> 0)."""
        stream = key, sender, epoch
        last = self._streams.get(stream)
        if last is None or seq == 1:
            if last is None:
                self._streams[stream] = [seq, 0, 0, 0]
                if len(self._streams) > self.capacity:
                    self.evicted += evict_over(self._streams, self.capacity, _SEQ, _SEEN)
            else:
                last[_SEQ] = seq
            return IN_ORDER
        if seq <= last[_SEQ]:
            return self._stale(last, seq)
        expected = last[_SEQ] + 1
        last[_SEQ] = seq
        return IN_ORDER if seq == expected else expected

    def _stale(self, last: list[int], seq: int) -> int:
        run = last[_STALE_RUN] + 1 if seq == last[_STALE_SEQ] + 1 else 1
        last[_STALE_SEQ], last[_STALE_RUN] = seq, run
        if run < RESYNC_AFTER:
            return STALE
        last[_SEQ], last[_STALE_RUN] = seq, 0  # the real stream, behind a forged higher seq
        self.resynced += 1
        return IN_ORDER

    def catch_up(
        self, key: bytes, sender: str, epoch: int, last_sent: int, *, bound_here: bool = False
    ) -> int:
        """A heartbeat says the sender's last seq on ``key`` is ``last_sent``; return the
        first missing seq if this stream's tail never arrived (then the stream is advanced
        to ``last_sent``), else 0. A stream this runtime has no baseline for is ignored,
        unless ``bound_here``: every message of it was bound for this runtime (the caller
        knows the sender started after this runtime's subscription was live), so none
        arrived: 1 is the first missing."""
        stream = key, sender, epoch
        last = self._streams.get(stream)
        if last is None:
            if not bound_here or last_sent < 1:
                return 0
            self._streams[stream] = [last_sent, 0, 0, 0]
            if len(self._streams) > self.capacity:
                self.evicted += evict_over(self._streams, self.capacity, _SEQ, _SEEN)
            return 1
        if last_sent <= last[_SEQ]:
            return 0
        first_missing = last[_SEQ] + 1
        last[_SEQ] = last_sent
        return first_missing
