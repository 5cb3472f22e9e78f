"""A spoken turn's record holds the stamps of every part of its wait for the first audio
frame that is not the runtime's (trailing silence, recognition, model, synthesis), in the
order the turn passed them, so xrmq's own share is read from what the turn did.

The box is the voice demo's stack (a ``voice`` process, Piper speech out, the offline
model) on a private bus, spoken to as the console tests do (``VoiceSession``).
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from pathlib import Path

import pytest

from xrmq.actors.edge.private_stack import PrivateStack
from xrmq.actors.edge.voice_demo import VoiceSession, voice_config
from xrmq.actors.runtime import Agent, RuntimeContext, subscribe
from xrmq.schemas import TurnRecord
from xrmq.topics import TURNS_TOPIC

import voice_support  # noqa: F401  (skips without espeak-ng or the voice extra)

pytest.importorskip("piper", reason="the voice extra (piper-tts) is not installed")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.voice_share import own_share  # bench/ is not installed: the repository's

pytestmark = pytest.mark.timeout(240)

FRAME_US = 20_000
"""A frame leaves the sender at its first sample's time, so a stamp on the frames' clock
(the endpoint) may run up to a frame ahead of the voice process's clock."""


class Records(Agent):
    def __init__(self) -> None:
        self.records: list[TurnRecord] = []
        self.arrived = asyncio.Event()

    @subscribe(TURNS_TOPIC)
    async def on_record(self, record: TurnRecord, ctx: RuntimeContext) -> None:
        if record.speech_end_us is not None:
            self.records.append(record)
            self.arrived.set()


async def test_a_spoken_turn_s_record_has_its_silence_recognition_model_and_synthesis_in_order(
    tmp_path,
):
    config = voice_config()
    async with PrivateStack(config) as stack:
        session = VoiceSession(stack.bus, tmp_path, config)
        records = session.runtime.register("records", Records())
        async with session:
            turn = await session.voice_turn(0, "Where did I leave the spare key?")
            await asyncio.wait_for(records.arrived.wait(), 60)
    assert "drawer" in turn.answer.lower()
    [record] = records.records
    stamps = {
        name: getattr(record, f"{name}_us")
        for name in (
            "speech_end",
            "endpoint",
            "recognition_start",
            "recognition_end",
            "transcribed",
            "model_request",
            "first_text",
            "first_played",
            "synthesis_start",
            "synthesis_end",
            "first_frame",
        )
    }
    assert None not in stamps.values(), stamps
    assert stamps["speech_end"] < stamps["endpoint"] <= stamps["recognition_end"] + FRAME_US
    assert stamps["endpoint"] <= stamps["transcribed"] + FRAME_US
    in_order = [name for name in stamps if name not in ("speech_end", "endpoint")]
    for earlier, later in itertools.pairwise(in_order):
        assert stamps[earlier] <= stamps[later], (earlier, later, stamps)
    share = own_share(record)
    assert share is not None
    assert 0 <= share.own_s <= share.wait_s
    assert all(seconds > 0 for seconds in share.parts_s.values()), share
