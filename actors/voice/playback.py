"""Speaker side of a voice client: ``audio.out`` frames to WAV files or a sound device.

``AudioRecorder`` collects each participant's frames between ``audio.playback``
``started`` and ``done`` and writes them as one WAV per response into ``wav_dir``
(``<participant>-<n>.wav``); ``on_frame`` lets a caller play each frame as it arrives
(``speaker_player``: sounddevice, imported only then). Frames arriving outside a
playback are kept too and written at the next ``done``. A participant's buffered audio
is bounded (``max_seconds``; older audio is dropped, counted).
"""

from __future__ import annotations

import asyncio
import re
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xrmq.actors.runtime import Agent, RuntimeContext, subscribe
from xrmq.schemas import AudioFrame, AudioPlayback
from xrmq.topics import AUDIO_OUT_TOPIC, AUDIO_PLAYBACK_TOPIC

from .mic import import_sounddevice
from .pcm import SAMPLE_RATE

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class AudioRecorder(Agent):
    """Writes ``audio.out`` responses as WAV files (see the module docstring)."""

    def __init__(
        self,
        wav_dir: str | Path | None = None,
        *,
        max_seconds: float = 120.0,
        on_frame: Callable[[str, AudioFrame], None] | None = None,
    ) -> None:
        self.wav_dir = Path(wav_dir) if wav_dir is not None else None
        if self.wav_dir is not None:
            self.wav_dir.mkdir(parents=True, exist_ok=True)
        self.max_seconds = max_seconds
        self._on_frame = on_frame
        self._frames: dict[str, list[AudioFrame]] = {}
        self._counts: dict[str, int] = {}
        self.frames_received = 0
        self.frames_dropped = 0
        self.last_frame_at: dict[str, float] = {}
        """Monotonic time each participant's last frame arrived."""
        self.written: list[Path] = []
        self._wrote: asyncio.Event | None = None

    @subscribe(AUDIO_OUT_TOPIC)
    async def on_frame(self, frame: AudioFrame, ctx: RuntimeContext) -> None:
        participant = ctx.participant_id or "_"
        self.frames_received += 1
        self.last_frame_at[participant] = time.monotonic()
        held = self._frames.setdefault(participant, [])
        held.append(frame)
        if len(held) * frame.duration_s > self.max_seconds:
            held.pop(0)
            self.frames_dropped += 1
        if self._on_frame is not None:
            self._on_frame(participant, frame)

    @subscribe(AUDIO_PLAYBACK_TOPIC)
    async def on_playback(self, message: AudioPlayback, ctx: RuntimeContext) -> None:
        if message.state == "done":
            self.flush(ctx.participant_id or "_")

    def flush(self, participant: str) -> Path | None:
        """Write what the participant's frames hold now as one WAV (if any); None otherwise."""
        held = self._frames.pop(participant, [])
        if not held or self.wav_dir is None:
            return None
        number = self._counts[participant] = self._counts.get(participant, 0) + 1
        target = self.wav_dir / f"{_UNSAFE.sub('_', participant)}-{number:04d}.wav"
        with wave.open(str(target), "wb") as writer:
            writer.setnchannels(held[0].channels)
            writer.setsampwidth(2)
            writer.setframerate(held[0].sample_rate)
            for frame in held:
                writer.writeframes(frame.pcm)
        self.written.append(target)
        if self._wrote is not None:
            self._wrote.set()
        return target

    async def wait_written(self, count: int = 1) -> list[Path]:
        """Return the written files once there are at least ``count``."""
        while len(self.written) < count:
            self._wrote = asyncio.Event()
            await self._wrote.wait()
        return self.written


def speaker_player() -> Callable[[str, AudioFrame], None]:
    """A frame callback that plays on the default output device (sounddevice, PortAudio)."""
    sounddevice = import_sounddevice()
    stream: Any = sounddevice.RawOutputStream(samplerate=SAMPLE_RATE, channels=1, dtype="int16")
    stream.start()

    def play(participant: str, frame: AudioFrame) -> None:
        stream.write(frame.pcm)

    return play
