"""Eight participants streaming microphone audio for a minute: no gaps, bounded memory.

Long on purpose (60 s of real-time audio, explicit timeout). The audio is quiet room
noise, so only the VAD runs (no speech, no recognition): CPU stays low on a shared box.
"""

from __future__ import annotations

import asyncio
import resource
import time

import pytest

from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.voice.listener import VOICE_INPUT_KIND, VoiceInput, register_voice_input

from buses import broker_process, expect_line, python, reap
from voice_support import shared_stt

PARTICIPANTS = 8
SECONDS = 60.0


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


@pytest.mark.timeout(180)
async def test_eight_participants_at_50_fps_for_a_minute_have_no_gaps_and_bounded_memory():
    stt = shared_stt()
    with broker_process() as bus:
        runtime = AgentRuntime(bus)
        register_voice_input(runtime, stt)
        async with runtime:
            streams = python("voice_streams.py", bus, str(PARTICIPANTS), str(SECONDS))
            try:
                expect_line(streams, "ready")
                cpu0, held, rss = time.process_time(), [], []
                done = asyncio.ensure_future(asyncio.to_thread(expect_line, streams, "sent"))
                while not done.done():  # sample memory every 2 s until the streams end
                    await asyncio.wait({done}, timeout=2.0)
                    instances = runtime.keyed_instances(VOICE_INPUT_KIND).values()
                    held.append(
                        max(
                            (v.held_samples for v in instances if isinstance(v, VoiceInput)),
                            default=0,
                        )
                    )
                    rss.append(rss_mb())
                _, sent, _ = (await done).split()
                cpu = time.process_time() - cpu0
                expected = PARTICIPANTS * round(SECONDS * 50)
                voices = runtime.keyed_instances(VOICE_INPUT_KIND)
                for voice in voices.values():  # every frame sent has been handled
                    assert isinstance(voice, VoiceInput)
                    await asyncio.wait_for(
                        voice.wait_until(lambda c: c.frames >= expected // PARTICIPANTS), 30
                    )
            finally:
                reap(streams)
            metrics = runtime.metrics()
    assert int(sent) == expected
    counts = [voice.counts for voice in voices.values() if isinstance(voice, VoiceInput)]
    assert len(counts) == PARTICIPANTS
    assert sum(c.frames for c in counts) == expected
    assert sum(c.frame_gaps for c in counts) == 0 and metrics.gaps == 0 and metrics.overflow == 0
    assert sum(c.utterances for c in counts) == 0  # noise is not speech: no recognition ran
    bound = (0.2 + 15.0) * 16000 + 2 * 512
    assert max(held) <= bound
    print(
        f"{PARTICIPANTS} participants x {SECONDS:.0f} s: CPU "
        f"{cpu / SECONDS * 100 / PARTICIPANTS:.2f}% "
        f"of a core per participant; RSS {rss[0]:.0f} -> {rss[-1]:.0f} MB; max held {max(held)} "
        "samples"
    )
    assert rss[-1] - rss[len(rss) // 3] < 32  # flat after warm-up
