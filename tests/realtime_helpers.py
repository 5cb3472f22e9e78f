"""Shared pieces of the realtime tests: a quick brain and collecting events."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from xrmq.actors.realtime.provider import RealtimeConnection, RealtimeEvent
from xrmq.actors.realtime.server import OfflineBrain

RATE = 24_000


def tone(seconds: float, *, amplitude: int = 3000, rate: int = RATE) -> bytes:
    """A square wave (speech to the server's energy VAD)."""
    samples = int(seconds * rate)
    period = rate // 200
    return b"".join((amplitude if (i // (period // 2)) % 2 else -amplitude).to_bytes(2, "little", signed=True)
                    for i in range(samples))


def silence(seconds: float, rate: int = RATE) -> bytes:
    return bytes(2 * int(seconds * rate))


class ScriptedEars(OfflineBrain):
    """OfflineBrain that 'hears' scripted utterances in order and speaks short silence.

    The answers are OfflineLLM's (real); only the speech ends are replaced, so protocol
    tests need neither Whisper nor espeak.
    """

    def __init__(self, utterances: Sequence[str] = (), *, speech_s: float = 0.5) -> None:
        super().__init__()
        self.utterances = deque(utterances)
        self.heard: list[int] = []
        self.speech_s = speech_s

    async def transcribe(self, pcm: bytes, sample_rate: int) -> str:
        self.heard.append(len(pcm))
        return self.utterances.popleft() if self.utterances else ""

    async def speak(self, text: str, sample_rate: int) -> bytes:
        return silence(self.speech_s, sample_rate)


async def until(connection: RealtimeConnection, kind: type, events: list[RealtimeEvent]) -> RealtimeEvent:
    """Read ``connection``'s events into ``events`` until one of type ``kind``."""
    async for event in connection.events():
        events.append(event)
        if isinstance(event, kind):
            return event
    raise AssertionError(f"the stream ended before a {kind.__name__}: {events}")
