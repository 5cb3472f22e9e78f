"""xrmq's own share of a spoken turn's wait for its first audio frame, from its ``TurnRecord``.

The wait is end of speech -> first audio frame (``speech_end_us`` -> ``first_frame_us``).
What is not the runtime's in it, each an interval the turn's record carries:

* silence: the voice activity detector's trailing silence (``speech_end`` -> ``endpoint``,
  both on the audio frames' clock);
* recognition: the recognizer's decode of the utterance's last words
  (``recognition_start`` -> ``recognition_end``);
* model: from the model request to the publication of the chunk that completed the first
  spoken piece (``model_request`` -> ``first_text``): the first token and the rest of the
  first sentence;
* synthesis: the synthesis of that piece (``synthesis_start`` -> ``synthesis_end``).

The own share is everything else: the wait minus the length of the union of those
intervals within it. Where they do not overlap that is the wait minus each part; where
they do (a recognition run at a pause, inside the trailing silence, that ended the turn
early or gave the transcript) the overlap counts once, so no part is subtracted twice.
Every stamp is Unix microseconds; the processes share one host's clock here. Pure: a
record in, numbers out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PARTS = ("silence", "recognition", "model", "synthesis")
_BOUNDS = {
    "silence": ("speech_end_us", "endpoint_us"),
    "recognition": ("recognition_start_us", "recognition_end_us"),
    "model": ("model_request_us", "first_text_us"),
    "synthesis": ("synthesis_start_us", "synthesis_end_us"),
}


@dataclass(frozen=True)
class Share:
    """One turn's wait for its first audio frame and its parts, in seconds."""

    wait_s: float
    """End of speech -> first audio frame."""
    parts_s: dict[str, float]
    """Each of ``PARTS``: its interval's length."""
    own_s: float
    """The wait minus the union of the parts within it."""


def union_us(intervals: list[tuple[int, int]], low: int, high: int) -> int:
    """Microseconds of ``[low, high]`` covered by at least one of ``intervals``."""
    covered, reach = 0, low
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, high)
        if end > start:
            covered += end - start
            reach = end
    return covered


def own_share(record: Any) -> Share | None:
    """The share of a record with every stamp it needs (``_BOUNDS``, ``first_frame_us``);
    None when one is missing (a typed turn, a reply that played no frame) or an interval
    runs backwards (a clock step)."""
    low, high = record.speech_end_us, record.first_frame_us
    if low is None or high is None or high < low:
        return None
    intervals: dict[str, tuple[int, int]] = {}
    for part, (start_name, end_name) in _BOUNDS.items():
        start, end = getattr(record, start_name), getattr(record, end_name)
        if start is None or end is None or end < start:
            return None
        intervals[part] = (start, end)
    covered = union_us(list(intervals.values()), low, high)
    return Share(
        (high - low) / 1e6,
        {part: (end - start) / 1e6 for part, (start, end) in intervals.items()},
        (high - low - covered) / 1e6,
    )
