"""Shared pieces of the realtime tests: a quick brain and collecting events."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

from xrmq.actors.realtime.provider import RealtimeConnection, RealtimeEvent, ResponseDone
from xrmq.actors.realtime.server import OfflineBrain
from xrmq.actors.realtime.session import RealtimeSession, SessionListener

RATE = 24_000
WAIT_S = 30.0
"""Upper bound of any wait in the realtime tests (they never sleep; this only turns a hang
into a failure even where the timeout signal cannot interrupt the event loop)."""


def tone(seconds: float, *, amplitude: int = 3000, rate: int = RATE) -> bytes:
    """A square wave (speech to the server's energy VAD)."""
    samples = int(seconds * rate)
    period = rate // 200
    return b"".join(
        (amplitude if (i // (period // 2)) % 2 else -amplitude).to_bytes(2, "little", signed=True)
        for i in range(samples)
    )


def silence(seconds: float, rate: int = RATE) -> bytes:
    return bytes(2 * int(seconds * rate))


class ScriptedEars(OfflineBrain):
    """OfflineBrain that 'hears' scripted utterances in order and speaks short silence.

    The answers are OfflineLLM's (real); only the speech ends are replaced, so protocol
    tests need neither Whisper nor espeak.
    """

    def __init__(self, utterances: Sequence[str] = (), *, speech_s: float = 0.1) -> None:
        super().__init__()
        self.utterances = deque(utterances)
        self.heard: list[bytes] = []
        self.speech_s = speech_s
        self.release: asyncio.Event | None = None
        """When set to an unset event, answers wait for it (a response held in progress)."""

    async def transcribe(self, pcm: bytes, sample_rate: int, prompt: str = "") -> str:
        self.heard.append(pcm)
        return self.utterances.popleft() if self.utterances else ""

    async def answer(self, instructions: str, items: Sequence[tuple[str, str]]) -> str:
        if self.release is not None:
            await self.release.wait()
        return await super().answer(instructions, items)

    async def speak(self, text: str, sample_rate: int) -> bytes:
        return silence(self.speech_s, sample_rate)


async def until(
    connection: RealtimeConnection, kind: type, events: list[RealtimeEvent]
) -> RealtimeEvent:
    """Read ``connection``'s events into ``events`` until one of type ``kind``."""
    async with asyncio.timeout(WAIT_S):
        async for event in connection.events():
            events.append(event)
            if isinstance(event, kind):
                return event
    raise AssertionError(f"the stream ended before a {kind.__name__}: {events}")


def tagged_frame(seq: int, seconds: float = 0.02, rate: int = RATE) -> bytes:
    """A frame whose every sample is ``seq + 1000`` (loud enough to be speech)."""
    return (seq + 1000).to_bytes(2, "little", signed=True) * int(seconds * rate)


def frame_tags(pcm: bytes, seconds: float = 0.02, rate: int = RATE) -> list[int]:
    """The tags of the frames in ``pcm`` in arrival order (see ``tagged_frame``)."""
    size = 2 * int(seconds * rate)
    return [
        int.from_bytes(pcm[at : at + 2], "little", signed=True) - 1000
        for at in range(0, len(pcm), size)
    ]


class Recorder(SessionListener):
    """Collects what a session reports; events to wait on instead of sleeping."""

    def __init__(self) -> None:
        self.done: list[tuple[str, ResponseDone]] = []
        self.chunks: list[bytes] = []
        self.started = asyncio.Event()
        self.answered = asyncio.Condition()
        self.failures: list[str] = []

    async def text(self, response_id: str, delta: str) -> None:
        self.started.set()

    async def audio(self, response_id: str, pcm: bytes) -> None:
        self.chunks.append(pcm)

    async def response_done(self, user_text: str, done: ResponseDone) -> None:
        async with self.answered:
            self.done.append((user_text, done))
            self.answered.notify_all()

    async def failed(self, reason: str) -> None:
        self.failures.append(reason)

    async def wait_answers(self, count: int) -> list[tuple[str, ResponseDone]]:
        # The bound is a safety net (a hang fails the test, whatever the event loop), not a wait.
        async with asyncio.timeout(WAIT_S), self.answered:
            await self.answered.wait_for(lambda: len(self.done) >= count)
        return self.done

    async def ask(self, session: RealtimeSession, text: str, seq: int) -> str:
        """Send ``text`` as the participant's turn ``seq`` and return the answer's text."""
        count = len(self.done)
        await session.send_text(text, seq)
        done = await self.wait_answers(count + 1)
        return done[count][1].text
