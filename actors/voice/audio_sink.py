"""AudioTopicSink: the renderer's sink that speaks onto the bus as ``audio.out`` frames.

Each segment is synthesized a sentence at a time (``PiperSynthesizer``: Piper, offline
and neural, in ``piper``; ``EspeakSynthesizer``: espeak-ng offline; ``LiteLLMSynthesizer``:
any litellm speech model; or any object with ``async synthesize(text) -> (samples,
rate)``, and optionally ``sentences(text)``, an async iterator of them, or
``timed_sentences(text)``, of them with when each one's synthesis began and returned), resampled to
16 kHz and published as 20 ms ``AudioFrame``s paced in real time against the monotonic
clock, so "playing" lasts as long as the audio. The next sentence is synthesized while
the one before plays (one sentence ahead), so the first frame follows the first
sentence, not the whole segment, and sentences follow each other without a gap when
synthesis is faster than speech. Cancelling ``play`` (an interruption, an urgent update,
a new query) stops between two frames, and stops the synthesis ahead: the last frame
leaves at most one frame period after the cut, also when the loop fell behind (an
overdue frame still yields).
``audio.playback`` says ``started`` before a response's first
frame and ``done`` when the response ended (completed or cut), so whether assistant
audio is playing is known on the bus (the voice gate listens to it). ``take_frames``
tells the renderer when a participant's first and last frame went out (its playback
stages), and ``take_synthesis`` when the synthesis of the first sentence it published
since began and returned.

``prepare(segment)`` starts synthesizing the segment that plays after the one playing (the
renderer's one piece ahead), once the playing one's synthesis is done: ``play`` of that
segment then starts with its audio ready, so the sentences of a streamed reply follow each
other without a gap. ``discard(participant)`` drops a prepared segment (a cut).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import numpy as np

from xrmq.actors.clock import now_us
from xrmq.schemas import AudioFrame, AudioPlayback
from xrmq.topics import AUDIO_OUT_TOPIC, AUDIO_PLAYBACK_TOPIC, Topic

from .ordering import ResponseEnded, Segment
from .pcm import FRAME_MS, SAMPLE_RATE, float_to_pcm16, frames, read_wav, resample
from .queues import split_sentences
from .sinks import find_espeak, run_espeak

Publish = Callable[..., Awaitable[Any]]
Ready = asyncio.Queue[tuple[bytes, int, int] | BaseException | None]
"""One segment's synthesized sentences (PCM16, when synthesis began and returned), then None."""


class Synthesizer(Protocol):
    async def synthesize(self, text: str) -> tuple[np.ndarray, int]: ...


class EspeakSynthesizer:
    """espeak-ng to a WAV on stdout; cancelling kills the process."""

    def __init__(
        self,
        *,
        words_per_minute: float = 175.0,
        voice: str | None = None,
        executable: str = "espeak-ng",
    ) -> None:
        found = find_espeak("EspeakSynthesizer", executable)
        self._command = [found, "--stdout", "--stdin", "-s", str(round(words_per_minute))]
        if voice:
            self._command += ["-v", voice]

    async def synthesize(self, text: str) -> tuple[np.ndarray, int]:
        return read_wav(await run_espeak(self._command, text, capture=True))


class LiteLLMSynthesizer:
    """Any litellm speech model (``litellm.aspeech``, e.g. ``openai/tts-1``), asked for WAV."""

    def __init__(
        self,
        model: str,
        *,
        voice: str = "alloy",
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        if not model or not model.strip():
            raise ValueError(
                "LiteLLMSynthesizer.model: must be a litellm model string, e.g. 'openai/tts-1'"
            )
        self.model, self.voice = model, voice
        self.api_base, self.api_key, self.timeout_s = api_base, api_key, timeout_s

    async def synthesize(self, text: str) -> tuple[np.ndarray, int]:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        options: dict[str, Any] = {"timeout": self.timeout_s}
        if self.api_base is not None:
            options["api_base"] = self.api_base
        if self.api_key is not None:
            options["api_key"] = self.api_key
        response = await litellm.aspeech(
            model=self.model, input=text, voice=self.voice, response_format="wav", **options
        )
        return read_wav(bytes(response.content))


class AudioTopicSink:
    """Publishes each segment's speech on ``topic`` (see the module docstring).

    ``publish`` is ``AgentRuntime.publish``; ``first_frame`` (optional) is called with the
    participant and the segment when its first frame is published (latency probes).
    """

    def __init__(
        self,
        publish: Publish,
        synthesizer: Synthesizer | None = None,
        *,
        topic: Topic[AudioFrame] = AUDIO_OUT_TOPIC,
        playback_topic: Topic[AudioPlayback] = AUDIO_PLAYBACK_TOPIC,
        frame_ms: int = FRAME_MS,
        clock: Callable[[], float] = time.monotonic,
        first_frame: Callable[[str, Segment], None] | None = None,
    ) -> None:
        if not 5 <= frame_ms <= 100:
            raise ValueError("AudioTopicSink.frame_ms: must be in [5, 100]")
        self._publish = publish
        self.synthesizer = synthesizer or EspeakSynthesizer()
        self.topic = topic
        self.playback_topic = playback_topic
        self.frame_ms = frame_ms
        self._clock = clock
        self._first_frame = first_frame
        self._counters: dict[str, int] = {}
        self._playing: set[str] = set()
        self._frame_times: dict[str, tuple[int, int]] = {}
        self._synthesis_times: dict[str, tuple[int, int]] = {}
        self._synthesizing: dict[str, asyncio.Task[None]] = {}
        self._prepared: dict[str, tuple[int, asyncio.Task[None], Ready]] = {}
        self.frames_sent = 0

    def take_frames(self, participant_id: str) -> tuple[int, int] | None:
        """When the participant's first and last frame since the last call went out (Unix
        microseconds); None: no frame. The renderer asks after each segment it played."""
        return self._frame_times.pop(participant_id, None)

    def take_synthesis(self, participant_id: str) -> tuple[int, int] | None:
        """When the synthesis of the participant's first sentence published since the last
        call began and returned (Unix microseconds); None: none published."""
        return self._synthesis_times.pop(participant_id, None)

    def prepare(self, segment: Segment) -> None:
        """Start synthesizing ``segment``, to play after the participant's playing segment
        (whose synthesis goes first); its ``play`` uses the audio."""
        participant = segment.participant_id
        self.discard(participant)
        ready: Ready = asyncio.Queue(maxsize=1)
        task = asyncio.create_task(
            self._synthesize(segment.text, ready, after=self._synthesizing.get(participant))
        )
        self._prepared[participant] = (segment.token, task, ready)

    def discard(self, participant_id: str) -> None:
        """Drop the participant's prepared segment, if any (its synthesis is cancelled)."""
        prepared = self._prepared.pop(participant_id, None)
        if prepared is not None:
            prepared[1].cancel()

    async def _sentences(self, text: str) -> AsyncIterator[tuple[np.ndarray, int, int, int]]:
        """Each sentence's audio, with when its synthesis began and returned (a synthesizer's
        ``timed_sentences`` says so itself: it knows its own queue)."""
        timed = getattr(self.synthesizer, "timed_sentences", None)
        if timed is not None:
            async for piece in timed(text):
                yield piece
            return
        stream = getattr(self.synthesizer, "sentences", None)
        if stream is not None:
            sentences = aiter(stream(text))
            while True:
                began_us = now_us()
                try:
                    samples, rate = await anext(sentences)
                except StopAsyncIteration:
                    return
                yield samples, rate, began_us, now_us()
        for sentence in split_sentences(text):
            began_us = now_us()
            samples, rate = await self.synthesizer.synthesize(sentence)
            yield samples, rate, began_us, now_us()

    async def _synthesize(
        self, text: str, ready: Ready, after: asyncio.Task[None] | None = None
    ) -> None:
        """Put each sentence's 16 kHz PCM16 on ``ready`` with when its synthesis began and
        returned (then None, or the error); with ``after``, once that task is done."""
        if after is not None:
            await asyncio.wait({after})
        try:
            async for samples, rate, began_us, returned_us in self._sentences(text):
                pcm = float_to_pcm16(resample(samples, rate, SAMPLE_RATE))
                await ready.put((pcm, began_us, returned_us))
        except Exception as error:
            await ready.put(error)
        else:
            await ready.put(None)

    async def play(self, segment: Segment) -> None:
        participant = segment.participant_id
        prepared = self._prepared.pop(participant, None)
        if prepared is not None and prepared[0] == segment.token:
            _, ahead, ready = prepared
        else:
            if prepared is not None:
                prepared[1].cancel()
            ready = asyncio.Queue(maxsize=1)
            ahead = asyncio.create_task(self._synthesize(segment.text, ready))
        self._synthesizing[participant] = ahead
        try:
            await self._publish_sentences(segment, ready)
        finally:
            ahead.cancel()
            await asyncio.gather(ahead, return_exceptions=True)
            if self._synthesizing.get(participant) is ahead:
                del self._synthesizing[participant]

    async def _publish_sentences(self, segment: Segment, ready: Ready) -> None:
        participant = segment.participant_id
        period = self.frame_ms / 1000.0
        start, sent = 0.0, 0  # the timeline: frame ``sent`` is due at start + sent * period
        while (piece := await ready.get()) is not None:
            if isinstance(piece, BaseException):
                raise piece
            pcm, began_us, returned_us = piece
            self._synthesis_times.setdefault(participant, (began_us, returned_us))
            if participant not in self._playing:
                self._playing.add(participant)
                await self._publish(
                    self.playback_topic,
                    AudioPlayback("started", now_us()),
                    participant_id=participant,
                    source="audio_sink",
                )
            if sent == 0 or self._clock() > start + sent * period:
                start = self._clock() - sent * period  # a late sentence starts the timeline anew
            for chunk in frames(pcm, SAMPLE_RATE, self.frame_ms):
                # A frame already due still yields: after a stall (a busy loop, a GC pause)
                # every remaining frame is overdue, and without the yield they would all
                # leave in one burst before a cut requested meanwhile could land.
                await asyncio.sleep(max(0.0, start + sent * period - self._clock()))
                number = self._counters.get(participant, 0)
                self._counters[participant] = number + 1
                sent_us = now_us()
                await self._publish(
                    self.topic,
                    AudioFrame(chunk, SAMPLE_RATE, 1, number, sent_us),
                    participant_id=participant,
                    source="audio_sink",
                )
                first_us = self._frame_times.get(participant, (sent_us,))[0]
                self._frame_times[participant] = (first_us, sent_us)
                self.frames_sent += 1
                sent += 1
                if sent == 1 and self._first_frame is not None:
                    self._first_frame(participant, segment)
        remaining = start + sent * period - self._clock()
        if sent and remaining > 0:
            await asyncio.sleep(remaining)

    async def end(self, ended: ResponseEnded) -> None:
        participant = ended.participant_id
        if participant in self._playing:
            self._playing.discard(participant)
            await self._publish(
                self.playback_topic,
                AudioPlayback("done", now_us()),
                participant_id=participant,
                source="audio_sink",
            )
