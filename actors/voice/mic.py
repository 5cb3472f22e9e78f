"""Microphone side of a voice client: WAV files or a sound device as ``audio.in`` frames.

``publish_wav`` sends a WAV file (any rate, converted to 16 kHz mono) as 20 ms frames
paced in real time (``realtime=False`` sends as fast as the bus takes them), followed by
``tail_s`` of silence so the listener's VAD sees the speech end. ``publish_device``
streams the default input device through sounddevice, which needs the PortAudio
library: it is imported only here, with a clear error when it is missing.
``input_stream`` and ``forward_blocks`` are its two halves, for a client that sends the
device's audio its own way (``xrmq console``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import AudioFrame
from xrmq.topics import AUDIO_IN_TOPIC

from .pcm import FRAME_MS, SAMPLE_RATE, float_to_pcm16, frames, read_wav, resample


class FrameSender:
    """Numbers and timestamps one participant's frames and publishes them in real time.

    A frame's ``timestamp_us`` is the stream's start plus the audio sent before it, so
    it is the time of its first sample whether or not the frames are paced.
    """

    def __init__(
        self,
        runtime: AgentRuntime,
        participant_id: str,
        *,
        frame_ms: int = FRAME_MS,
        realtime: bool = True,
    ) -> None:
        self.runtime = runtime
        self.participant_id = participant_id
        self.frame_ms = frame_ms
        self.realtime = realtime
        self.sent = 0
        self._start: float | None = None
        self._start_us = 0

    async def send(self, pcm: bytes) -> None:
        """Send mono 16 kHz PCM16 bytes as frames, waiting for each frame's time."""
        period = self.frame_ms / 1000.0
        for chunk in frames(pcm, SAMPLE_RATE, self.frame_ms):
            if self._start is None:
                self._start, self._start_us = time.monotonic(), time.time_ns() // 1000
            if self.realtime:
                delay = self._start + self.sent * period - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            # The first sample's time: the stream's start plus the audio before it.
            timestamp_us = self._start_us + self.sent * self.frame_ms * 1000
            frame = AudioFrame(chunk, SAMPLE_RATE, 1, self.sent, timestamp_us)
            self.runtime.send(
                AUDIO_IN_TOPIC, frame, participant_id=self.participant_id, source="mic"
            )
            self.sent += 1
            if not self.realtime and self.sent % 50 == 0:
                await asyncio.sleep(0)


async def send_together(
    runtime: AgentRuntime, streams: Mapping[str, Sequence[bytes]], *, paced: bool = True
) -> None:
    """Send several participants' frames at once, interleaved frame by frame (each
    stream: its participant's PCM16 frames, of ``FRAME_MS``): with ``paced`` one of each
    every ``FRAME_MS`` as microphones deliver them, else as fast as they go."""
    senders = {who: FrameSender(runtime, who, realtime=False) for who in streams}
    loop = asyncio.get_running_loop()
    start = loop.time()
    for index in range(max((len(chunks) for chunks in streams.values()), default=0)):
        if paced:
            await asyncio.sleep(max(0.0, start + index * FRAME_MS / 1000 - loop.time()))
        for who, chunks in streams.items():
            if index < len(chunks):
                await senders[who].send(chunks[index])


def wav_pcm(path: str | Path, *, lead_s: float = 0.3, tail_s: float = 0.8) -> bytes:
    """A WAV file as 16 kHz mono PCM16, with silence before and after."""
    samples, rate = read_wav(path)
    samples = resample(samples, rate)
    lead = np.zeros(round(lead_s * SAMPLE_RATE), np.float32)
    tail = np.zeros(round(tail_s * SAMPLE_RATE), np.float32)
    return float_to_pcm16(np.concatenate([lead, samples, tail]))


async def publish_wav(
    runtime: AgentRuntime,
    path: str | Path,
    participant_id: str,
    *,
    realtime: bool = True,
    tail_s: float = 0.8,
) -> int:
    """Publish one WAV file as ``audio.in`` frames; returns the number of frames."""
    sender = FrameSender(runtime, participant_id, realtime=realtime)
    await sender.send(wav_pcm(path, tail_s=tail_s))
    return sender.sent


async def publish_device(runtime: AgentRuntime, participant_id: str, stop: asyncio.Event) -> int:
    """Stream the default microphone until ``stop`` is set; returns the frames sent."""
    sounddevice = import_sounddevice()
    sender = FrameSender(runtime, participant_id, realtime=False)
    stream, blocks = input_stream(sounddevice)
    with stream:
        await forward_blocks(blocks, sender.send, stop)
    return sender.sent


def input_stream(sounddevice: Any) -> tuple[Any, asyncio.Queue[bytes]]:
    """The default input device as an unstarted ``RawInputStream`` (``with`` runs it) and the
    queue its 20 ms blocks of 16 kHz PCM16 arrive on, in the running loop. The queue holds
    100 blocks (2 s): a consumer that stalls loses the oldest audio, never grows it."""
    loop = asyncio.get_running_loop()
    blocks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=100)

    def on_block(data: Any, count: int, timing: Any, status: Any) -> None:
        loop.call_soon_threadsafe(_offer, blocks, bytes(data))

    stream = sounddevice.RawInputStream(
        samplerate=SAMPLE_RATE,
        channels=1,
        dtype="int16",
        blocksize=SAMPLE_RATE * FRAME_MS // 1000,
        callback=on_block,
    )
    return stream, blocks


async def forward_blocks(
    blocks: asyncio.Queue[bytes], send: Callable[[bytes], Awaitable[None]], stop: asyncio.Event
) -> None:
    """Hand each block to ``send``, in order, until ``stop`` is set."""
    while not stop.is_set():
        getter = asyncio.ensure_future(blocks.get())
        waiter = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait({getter, waiter}, return_when=asyncio.FIRST_COMPLETED)
        for task in (getter, waiter):
            if task not in done:
                task.cancel()
        if getter in done:
            await send(getter.result())


def _offer(queue: asyncio.Queue[bytes], block: bytes) -> None:
    if queue.full():
        queue.get_nowait()  # a stalled bus drops the oldest audio, never grows
    queue.put_nowait(block)


def import_sounddevice() -> Any:
    """sounddevice, or a RuntimeError that says what to install."""
    try:
        import sounddevice
    except (ImportError, OSError) as error:
        raise RuntimeError(
            "a real microphone or speaker needs sounddevice and the PortAudio library "
            f"(pip install sounddevice; apt-get install libportaudio2): {error}; "
            "use --wav FILE / --sink wav instead"
        ) from None
    return sounddevice
