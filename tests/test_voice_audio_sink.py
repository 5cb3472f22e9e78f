"""AudioTopicSink's pacing and cut, on a fake clock and a recording publish (no bus, no espeak)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import numpy as np
else:
    np = pytest.importorskip("numpy")

from xrmq.actors.voice.audio_sink import AudioTopicSink
from xrmq.actors.voice.ordering import Segment
from xrmq.schemas import AudioFrame


class Tone:
    """A synthesizer returning ``seconds`` of a 440 Hz tone at 16 kHz."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def synthesize(self, text: str) -> tuple[np.ndarray, int]:
        t = np.arange(int(16000 * self.seconds)) / 16000
        return (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000


def segment() -> Segment:
    return Segment(
        participant_id="p1",
        response=1,
        kind="reply",
        sources=("reply",),
        request_id="r1",
        text="hello",
        timestamp_us=None,
        first=True,
        urgent=False,
        token=1,
    )


async def test_frames_overdue_after_a_stalled_loop_still_let_a_cut_land_before_the_next_frame():
    """After a stall every remaining frame is overdue: the sink must not burst them all
    without yielding, or a cut that arrived during the stall would land seconds late."""
    now = [0.0]
    published: list[AudioFrame] = []
    first = asyncio.Event()

    async def publish(topic, message, **_):
        if isinstance(message, AudioFrame):
            published.append(message)
            if len(published) == 1:
                now[0] += 10.0  # the loop stalled for 10 s after the first frame
                first.set()

    sink = AudioTopicSink(publish, Tone(5.0), clock=lambda: now[0])
    play = asyncio.create_task(sink.play(segment()))
    await first.wait()
    play.cancel()  # the cut, requested while 249 frames are overdue
    with pytest.raises(asyncio.CancelledError):
        await play
    assert len(published) <= 2
