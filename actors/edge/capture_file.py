"""Capture files: the broker's capture stream written to disk and read back (``xrmq
record``/``replay``).

Format: the 8-byte magic ``XRMQCAP1``, then one record per message: its receive time
(``uint64`` microseconds since the epoch), its frame count (``uint32``), and each frame
as a ``uint32`` length followed by its bytes; all little-endian. Frames are kept as
they crossed the bus (``[key, metadata, payload]``), so a replay carries the original
envelopes (message ids, senders, sequence numbers) and payloads untouched.

Encoding, decoding and the replay schedule are pure; the commands in ``capture``
do the socket I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import BinaryIO, NamedTuple

MAGIC = b"XRMQCAP1"
_HEADER = struct.Struct("<QI")
_LENGTH = struct.Struct("<I")


class Record(NamedTuple):
    timestamp_us: int
    """When the recorder received the message."""
    frames: tuple[bytes, ...]


def encode_record(timestamp_us: int, frames: Sequence[bytes]) -> bytes:
    parts = [_HEADER.pack(timestamp_us, len(frames))]
    for frame in frames:
        parts += (_LENGTH.pack(len(frame)), frame)
    return b"".join(parts)


def read_records(stream: BinaryIO, *, name: str = "capture") -> Iterator[Record]:
    """The records of a capture file, in order; ``ValueError`` naming ``name`` for a bad or
    truncated file."""
    if stream.read(len(MAGIC)) != MAGIC:
        raise ValueError(f"{name}: not an xrmq capture file (missing {MAGIC.decode()} header)")
    index = 0
    while header := stream.read(_HEADER.size):
        if len(header) < _HEADER.size:
            raise ValueError(f"{name}: record {index} is truncated")
        timestamp_us, count = _HEADER.unpack(header)
        frames = []
        for _ in range(count):
            length_bytes = stream.read(_LENGTH.size)
            frame = (
                stream.read(_LENGTH.unpack(length_bytes)[0])
                if len(length_bytes) == _LENGTH.size
                else None
            )
            if frame is None or len(frame) != _LENGTH.unpack(length_bytes)[0]:
                raise ValueError(f"{name}: record {index} is truncated")
            frames.append(frame)
        yield Record(timestamp_us, tuple(frames))
        index += 1


def replay_offsets(timestamps_us: Sequence[int], speed: float) -> list[float]:
    """Seconds after the start at which each record is replayed: recorded gaps divided by ``speed``.

    ``speed`` 2 plays twice as fast; ``inf`` sends back to back. Order is kept even if
    the recorded clock stepped backwards (an offset never precedes the previous one).
    """
    if not speed > 0:
        raise ValueError(f"--speed: must be > 0, got {speed}")
    offsets: list[float] = []
    previous = 0.0
    for timestamp in timestamps_us:
        offset = max(previous, (timestamp - timestamps_us[0]) / 1e6 / speed)
        offsets.append(offset)
        previous = offset
    return offsets
