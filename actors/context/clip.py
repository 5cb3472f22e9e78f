"""Byte arithmetic on rendered text: UTF-8 sizes and start-and-end clipping.

Every budget in the context engine is in UTF-8 bytes of rendered text (docs/context.md), and
every place that must fit text into a budget (a very large exchange or update, an
over-limit summary, an entry larger than a compaction request) keeps the text's start
and end with an omission marker between them. Cuts fall on character boundaries, so a
clipped string is always valid UTF-8 and never holds half a character.
"""

from __future__ import annotations

OMISSION_MARKER = "\n[... middle omitted ...]\n"
"""Stands where clipping removed the middle of a text."""

_MARKER_BYTES = len(OMISSION_MARKER.encode())


def utf8_size(text: str) -> int:
    """Size of ``text`` in UTF-8 bytes, the unit of every context budget."""
    return len(text.encode())


def _boundary_at_or_before(data: bytes, index: int) -> int:
    """Largest character boundary <= ``index`` (continuation bytes are 0b10xxxxxx)."""
    while 0 < index < len(data) and data[index] & 0xC0 == 0x80:
        index -= 1
    return index


def _boundary_at_or_after(data: bytes, index: int) -> int:
    """Smallest character boundary >= ``index``."""
    while index < len(data) and data[index] & 0xC0 == 0x80:
        index += 1
    return index


def clip_middle(text: str, limit_bytes: int) -> str:
    """Return ``text`` if it fits ``limit_bytes``, else its start and end around a marker.

    Contract: the result is at most ``limit_bytes`` UTF-8 bytes and never splits a
    character. The start gets the extra byte of an odd split, because it carries the
    header (time, source) of a rendered entry. A limit too small for the marker keeps
    only as much of the start as fits.
    """
    data = text.encode()
    if len(data) <= limit_bytes:
        return text
    if limit_bytes <= _MARKER_BYTES:
        return data[: _boundary_at_or_before(data, max(limit_bytes, 0))].decode()
    room = limit_bytes - _MARKER_BYTES
    head_end = _boundary_at_or_before(data, (room + 1) // 2)
    tail_start = _boundary_at_or_after(data, len(data) - room // 2)
    return data[:head_end].decode() + OMISSION_MARKER + data[tail_start:].decode()
