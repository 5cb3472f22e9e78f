"""Rendered text of context blocks, and the merge of a participant's sections.

The formats are part of the prompt contract (docs/context.md, "Prompt layout"): the model
resolves conflicts between sections from the times shown, so every dated block starts
with its recorded time in UTC, and every block names where its text came from:

- exchange:            ``[2024-05-01 14:13:05 UTC] User: <request>\\nAssistant: <answer>``
- incremental update:  ``[2024-05-01 14:18:00 UTC] [sample.notes] <text>``
- summary-topic state: ``[2024-05-01 14:18:00 UTC] [sample.monitor-window] Current state: <text>``
- dialogue summary:    ``Summary of earlier conversation: <summary>``
- topic summary:       ``Summary of earlier [sample.notes] context: <summary>``

Sizes, budgets and compaction material all use these rendered texts, so what is
measured is exactly what the model reads. Functions here are pure: a time is formatted
from the microseconds it is given, never from a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import cast

from xrmq.schemas import ContextBlock

from .clip import clip_middle, utf8_size

DIALOGUE_SECTION = "dialogue"
"""Name of the dialogue section (in job identities and logs); topic sections are named
after their topics. A topic may itself be called "dialogue": sections are told apart by
kind, never by name."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TIMESTAMP_US = (
    int((datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) - _EPOCH).total_seconds()) * 1_000_000
)
"""Largest timestamp a block can show (the last second of year 9999)."""


def check_timestamp(timestamp_us: int) -> int:
    """Return ``timestamp_us`` if it is Unix microseconds a block can show, else raise."""
    if isinstance(timestamp_us, bool) or not isinstance(timestamp_us, int):
        raise ValueError("timestamp_us: must be an int of Unix microseconds")
    if not 0 <= timestamp_us <= MAX_TIMESTAMP_US:
        raise ValueError(f"timestamp_us: must be between 0 and {MAX_TIMESTAMP_US}")
    return timestamp_us


def format_time(timestamp_us: int) -> str:
    """``YYYY-MM-DD HH:MM:SS UTC`` for Unix microseconds (seconds shown, never a clock read)."""
    return (_EPOCH + timedelta(microseconds=timestamp_us)).strftime("%Y-%m-%d %H:%M:%S UTC")


def exchange_text(request: str, answer: str, timestamp_us: int) -> str:
    """Rendered text of one completed exchange."""
    return f"[{format_time(timestamp_us)}] User: {request}\nAssistant: {answer}"


def update_text(source: str, text: str, timestamp_us: int) -> str:
    """Rendered text of one incremental topic update."""
    return f"[{format_time(timestamp_us)}] [{source}] {text}"


def state_text(source: str, text: str, timestamp_us: int) -> str:
    """Rendered text of a summary topic's current state."""
    return f"[{format_time(timestamp_us)}] [{source}] Current state: {text}"


def summary_label(section: str, *, dialogue: bool) -> str:
    """The words that introduce a section's rolling summary."""
    if dialogue:
        return "Summary of earlier conversation: "
    return f"Summary of earlier [{section}] context: "


def render_participant(sections: Iterable[Sequence[ContextBlock]]) -> tuple[ContextBlock, ...]:
    """Merge the rendered sections of one participant into prompt order.

    Summaries (no timestamp) come first, in the order the sections are given (the
    manager passes dialogue first, then topics in configured order); then every dated
    block in recorded-time order. The sort is stable, so blocks with equal times keep
    section order and, within a section, recorded order.
    """
    summaries: list[ContextBlock] = []
    dated: list[ContextBlock] = []
    for blocks in sections:
        for block in blocks:
            (summaries if block.timestamp_us is None else dated).append(block)
    dated.sort(key=_timestamp)
    return (*summaries, *dated)


def _timestamp(block: ContextBlock) -> int:
    """The sort key of a dated block (only dated blocks are sorted by it)."""
    return cast(int, block.timestamp_us)


def fit_newest(
    dated: Sequence[ContextBlock], room: int
) -> tuple[tuple[ContextBlock, ...], int, bool]:
    """The newest of ``dated`` (in time order) that fit in ``room`` bytes, in time order.

    Returns ``(kept, omitted, clipped_newest)``: the oldest blocks are left out; when not
    even the newest fits, it keeps its start and end within ``room``. Shared by
    ``Section.render`` and the manager's replica, so both leave out the same blocks.
    """
    kept: list[ContextBlock] = []
    for block in reversed(dated):
        size = utf8_size(block.text)
        if size > room:
            break
        kept.append(block)
        room -= size
    clipped = False
    if not kept and dated:
        newest = dated[-1]
        text = clip_middle(newest.text, room)
        if text:
            kept.append(ContextBlock(newest.timestamp_us, text))
            clipped = True
    return tuple(reversed(kept)), len(dated) - len(kept), clipped
