"""xrmq's own share of a spoken turn (``bench/voice_share.py``): the wait for the first audio
frame less the trailing silence, the recognition, the model and the synthesis, each
overlap counted once, from a real ``TurnRecord``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from xrmq.schemas import TurnRecord  # noqa: E402

from bench.voice_share import PARTS, own_share, union_us  # noqa: E402  (bench/ is not installed)

MS = 1000
T0 = 1_700_000_000_000_000


def _record(**stamps_ms: float | None) -> TurnRecord:
    """A spoken turn whose stamps are milliseconds after ``T0`` (None: absent)."""
    times = {
        "speech_end": 0,
        "endpoint": 400,
        "recognition_start": 410,
        "recognition_end": 510,
        "model_request": 530,
        "first_text": 890,
        "synthesis_start": 900,
        "synthesis_end": 990,
        "first_frame": 1000,
    } | stamps_ms
    fields: dict[str, Any] = {
        f"{name}_us": None if value is None else T0 + round(value * MS)
        for name, value in times.items()
    }
    return TurnRecord("turn", "p1", "answered", **fields)


def test_the_own_share_is_the_wait_less_each_part_when_they_do_not_overlap() -> None:
    share = own_share(_record())
    assert share is not None
    assert share.wait_s == pytest.approx(1.0)
    assert share.parts_s == pytest.approx(
        {"silence": 0.4, "recognition": 0.1, "model": 0.36, "synthesis": 0.09}
    )
    assert set(share.parts_s) == set(PARTS)
    # 1000 - 400 - 100 - 360 - 90: the gaps between the parts, the runtime's own.
    assert share.own_s == pytest.approx(0.05)


def test_a_recognition_run_inside_the_trailing_silence_is_subtracted_once() -> None:
    # A recognition at a pause (during the hangover) that gave the transcript.
    share = own_share(_record(recognition_start=250, recognition_end=350))
    assert share is not None
    assert share.parts_s["recognition"] == pytest.approx(0.1)
    # 1000 - 400 (silence, holding the recognition) - 360 - 90; the gap 400-530 is own.
    assert share.own_s == pytest.approx(0.15)


def test_the_parts_count_only_inside_the_wait_for_the_first_frame() -> None:
    # The stamps of a synthesis that ran on past the first frame (its clock) and a model
    # request stamped before the end of speech count only between the two.
    share = own_share(_record(model_request=-50, synthesis_end=1100, first_frame=995))
    assert share is not None
    assert share.own_s >= 0
    assert union_us([(T0 - 50 * MS, T0 + 10 * MS)], T0, T0 + 20 * MS) == 10 * MS


def test_overlapping_intervals_are_covered_once_and_gaps_not_at_all() -> None:
    assert union_us([(0, 10), (5, 20), (30, 40), (35, 38)], 0, 100) == 30
    assert union_us([], 0, 100) == 0
    assert union_us([(50, 200)], 0, 100) == 50


@pytest.mark.parametrize(
    "missing", ["endpoint", "recognition_end", "model_request", "first_text", "synthesis_start"]
)
def test_a_turn_missing_a_stamp_has_no_share(missing: str) -> None:
    assert own_share(_record(**{missing: None})) is None


def test_a_typed_turn_and_a_reply_without_frames_have_no_share() -> None:
    assert own_share(_record(speech_end=None)) is None
    assert own_share(_record(first_frame=None)) is None
    assert own_share(_record(synthesis_start=995, synthesis_end=990)) is None
