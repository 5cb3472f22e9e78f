"""Microphone streams process: PARTICIPANTS streams of quiet room noise at 50 frames/s.

argv: BUS PARTICIPANTS SECONDS. Each participant "p0".."pN-1" sends 20 ms PCM16 frames,
paced in real time against the monotonic clock, for SECONDS. Prints "ready" once on the
bus and "sent FRAMES CPU_S" when done (CPU seconds this process used).
"""

import asyncio
import sys
import time

import numpy as np

from xrmq.actors.runtime import AgentRuntime, run
from xrmq.actors.voice.mic import FrameSender
from xrmq.actors.voice.pcm import float_to_pcm16

bus, count, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])


async def main() -> None:
    rng = np.random.default_rng(3)
    noise = [
        float_to_pcm16((rng.standard_normal(320) * 0.003).astype(np.float32)) for _ in range(50)
    ]
    async with AgentRuntime(bus, name="voice-streams") as runtime:
        print("ready", flush=True)
        senders = [FrameSender(runtime, f"p{i}", realtime=False) for i in range(count)]
        start = time.monotonic()
        for index in range(round(seconds * 50)):
            delay = start + index * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            for sender in senders:
                await sender.send(noise[index % len(noise)])
        await asyncio.sleep(0.2)  # let the last frames leave the socket before it closes
        print(f"sent {sum(s.sent for s in senders)} {time.process_time():.2f}", flush=True)


run(main())
