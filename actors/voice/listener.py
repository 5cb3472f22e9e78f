"""VoiceInput: one participant's speech in, as ``UserQuery`` (and ``Interrupted``) out.

A keyed actor (one per participant, ``register_voice_input``) on ``audio.in``: each frame
is converted to 16 kHz mono, cut into 512-sample VAD chunks, scored by Silero
(``SileroStream``, the thin shell) and fed to the pure ``UtteranceSegmenter``. A finished
utterance goes to a bounded queue; the actor's recognizer task transcribes it with the
participant's context as the prompt (``bias_prompt``) and publishes a ``UserQuery``
whose ``timestamp_us`` is when the speech started; the participants of a process take
turns at the recognizer round-robin (``RecognizerTurns``). The ``BargeInGate`` decides, from
``audio.playback``, whether speech over the assistant's audio interrupts it (publishes
``Interrupted`` at once) or is a backchannel (dropped, counted).

With ``incremental_step_s`` (and a recognizer that gives word times), the speech is
recognized while it goes on: every ``incremental_step_s`` of new speech (the first after two:
Whisper guesses on a second of audio), while the
recognizer is idle, the audio after the committed words is decoded and the words two
decodes agree on are committed (``LocalAgreement``); the end of the utterance (or the
recognition at a pause) then decodes only the audio after the committed words, prompted
with the context and the committed text, and the transcript is the two joined.

Bounded: the segmenter holds at most ``max_utterance_s`` of audio, the recognition queue
``queue_capacity`` utterances (the oldest is dropped, counted, when it is full). A frame
whose counter skips is counted in ``frame_gaps``. ``participant.left`` releases
everything: the instance is retired, its task cancelled, its buffers dropped.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xrmq.actors.clock import now_us
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, get_logger, subscribe
from xrmq.schemas import (
    AudioFrame,
    AudioPlayback,
    ContextBlock,
    Interrupted,
    ParticipantLeft,
    UserQuery,
)
from xrmq.schemas._validation import check_positive
from xrmq.topics import (
    AUDIO_IN_TOPIC,
    AUDIO_PLAYBACK_TOPIC,
    INTERRUPTED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    QUERY_TOPIC,
    Topic,
)

from .bias import bias_prompt
from .endpoint import ends_turn
from .gate import BargeInGate, GateSettings
from .incremental import LocalAgreement, Word
from .pcm import SAMPLE_RATE, pcm16_to_float, resample
from .recognizer_turns import RecognizerTurns
from .silero import CHUNK_SAMPLES, SileroModel, SileroStream
from .stt import SpeechToText
from .vad import Discarded, Pause, SegmenterSettings, SpeechStarted, Utterance, UtteranceSegmenter

VOICE_INPUT_KIND = "voice"
ContextSource = Callable[[str], Sequence[ContextBlock]]


@dataclass(frozen=True)
class VoiceSettings:
    segmenter: SegmenterSettings = field(default_factory=SegmenterSettings)
    gate: GateSettings = field(default_factory=GateSettings)
    queue_capacity: int = 4
    """Utterances waiting for recognition per participant."""
    context_bias: bool = True
    """Give the recognizer the participant's context as its prompt."""
    incremental_step_s: float = 0.0
    """Decode the speech so far after each this much new speech (0: at its end only)."""
    incremental_window_s: float = 8.0
    """The most audio a decode while speaking covers (``LocalAgreement.window_s``)."""

    def __post_init__(self) -> None:
        check_positive(self.queue_capacity, "VoiceSettings.queue_capacity")
        if self.incremental_step_s < 0:
            raise ValueError("VoiceSettings.incremental_step_s: must be >= 0")
        if not self.incremental_window_s > 0:
            raise ValueError("VoiceSettings.incremental_window_s: must be > 0")


@dataclass
class VoiceCounts:
    frames: int = 0
    frame_gaps: int = 0
    utterances: int = 0
    discarded: int = 0
    queries: int = 0
    interruptions: int = 0
    backchannels: int = 0
    empty_transcripts: int = 0
    early_ends: int = 0
    incremental_decodes: int = 0
    """Decodes while the participant spoke."""
    incremental_skipped: int = 0
    """Steps not decoded because the recognizer was busy (others' turns go first)."""
    committed_words: int = 0
    """Turns ended at a pause because the words so far ended a sentence."""
    queue_dropped: int = 0
    stt_failures: int = 0


@dataclass
class Recognition:
    """When the recognition of an utterance's last words began and returned (Unix
    microseconds): from the first decode of its audio after the endpoint (or the wait for
    the decode of the speech so far, already running) to the decode that gave its text."""

    start_us: int | None = None
    end_us: int | None = None

    def begin(self) -> None:
        if self.start_us is None:
            self.start_us = now_us()

    def done(self) -> None:
        self.end_us = now_us()


class VoiceInput(Agent):
    """One participant's voice input (see the module docstring)."""

    def __init__(
        self,
        participant_id: str,
        stt: SpeechToText,
        *,
        vad: SileroModel,
        settings: VoiceSettings = VoiceSettings(),
        context: ContextSource | None = None,
        turns: RecognizerTurns | None = None,
    ) -> None:
        self.participant_id = participant_id
        self.stt = stt
        self.turns = turns
        self.settings = settings
        self.context = context
        self.counts = VoiceCounts()
        self._vad = SileroStream(vad)
        self._segmenter = UtteranceSegmenter(settings.segmenter)
        self._gate = BargeInGate(settings.gate)
        self._pending = np.zeros(0, np.float32)
        self._next_frame: int | None = None
        self._next_us = 0
        self._queue: deque[Utterance] = deque()
        self._ready = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._speculation: tuple[Pause, asyncio.Task[str], Recognition] | None = None
        self._changed: asyncio.Event | None = None
        self._agreement: tuple[int, LocalAgreement] | None = None
        self._advancing: asyncio.Task[None] | None = None
        self._decoded_samples = 0
        self._words = settings.incremental_step_s > 0 and hasattr(stt, "transcribe_words")
        self.stopped = asyncio.Event()
        """Set once the instance stopped and released its buffers (retired or shut down)."""
        self._log = get_logger(actor=VOICE_INPUT_KIND, participant=participant_id)

    async def on_start(self) -> None:
        self._worker = asyncio.create_task(
            self._recognize(), name=f"voice-stt-{self.participant_id}"
        )

    async def on_stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None
        self._release()
        self.stopped.set()

    def gauges(self) -> dict[str, float]:
        return {
            "voice.held_samples": float(self._segmenter.held_samples + self._pending.size),
            "voice.queued_utterances": float(len(self._queue)),
            "voice.frame_gaps": float(self.counts.frame_gaps),
        }

    @property
    def held_samples(self) -> int:
        """Audio samples this participant's input holds now (bounded by the settings)."""
        queued = sum(utterance.audio.size for utterance in self._queue)
        return self._segmenter.held_samples + self._pending.size + queued

    async def wait_until(self, condition: Callable[[VoiceCounts], bool]) -> VoiceCounts:
        """Return the counts once ``condition(counts)`` holds (checked after each frame and
        each decision)."""
        while not condition(self.counts):
            self._changed = asyncio.Event()
            await self._changed.wait()
        return self.counts

    def _decided(self) -> None:
        if self._changed is not None:
            self._changed.set()

    # -- handlers ---------------------------------------------------------------------

    @subscribe(AUDIO_IN_TOPIC)
    async def on_audio(self, frame: AudioFrame, ctx: RuntimeContext) -> None:
        counts = self.counts
        counts.frames += 1
        if self._next_frame is not None and frame.frame != self._next_frame:
            if frame.frame > self._next_frame:
                counts.frame_gaps += frame.frame - self._next_frame
            self._log.info("voice.frame_gap", expected=self._next_frame, got=frame.frame)
        self._next_frame = frame.frame + 1
        samples = pcm16_to_float(frame.pcm, frame.channels)
        if frame.sample_rate != SAMPLE_RATE:
            samples = resample(samples, frame.sample_rate)
        if self._pending.size == 0:
            self._next_us = frame.timestamp_us
        pending = np.concatenate([self._pending, samples]) if self._pending.size else samples
        offset = 0
        while pending.size - offset >= CHUNK_SAMPLES:
            chunk = pending[offset : offset + CHUNK_SAMPLES]
            offset += CHUNK_SAMPLES
            chunk_us = self._next_us
            self._next_us += CHUNK_SAMPLES * 1_000_000 // SAMPLE_RATE
            self._events(self._segmenter.push(chunk, self._vad.probability(chunk), chunk_us))
        self._pending = pending[offset:].copy() if offset else pending
        if self._changed is not None:
            self._changed.set()

    @subscribe(AUDIO_PLAYBACK_TOPIC)
    async def on_playback(self, message: AudioPlayback, ctx: RuntimeContext) -> None:
        self._gate.playback(message.state == "started")

    @subscribe(PARTICIPANT_LEFT_TOPIC)
    async def on_left(self, message: ParticipantLeft, ctx: RuntimeContext) -> None:
        if ctx.participant_id != self.participant_id:
            return  # a global message: not this participant's leaving
        self._release()
        runtime = self.runtime
        if runtime is not None:
            # Retiring stops this mailbox, so it cannot be awaited from its own handler.
            retire = runtime.retire(VOICE_INPUT_KIND, self.participant_id)
            asyncio.get_running_loop().create_task(retire)

    # -- segmentation events, recognition ---------------------------------------------

    def _events(self, events: list[Utterance | SpeechStarted | Discarded | Pause]) -> None:
        if self._segmenter.in_speech and self._gate.voiced(self._segmenter.speech_s):
            self._interrupt("duration")
        if self._words and not events:
            self._maybe_advance()
        for event in events:
            if isinstance(event, Utterance):
                self.counts.utterances += 1
                if len(self._queue) >= self.settings.queue_capacity:
                    self._queue.popleft()
                    self.counts.queue_dropped += 1
                    self._log.warning("voice.queue_full", capacity=self.settings.queue_capacity)
                self._queue.append(event)
                self._ready.set()
            elif isinstance(event, Discarded):
                self.counts.discarded += 1
            elif isinstance(event, Pause):
                self._drop_speculation()
                timing = Recognition()
                task = asyncio.get_running_loop().create_task(self._speculate(event, timing))
                task.add_done_callback(
                    _retrieve
                )  # unawaited: the utterance's own recognition reports it
                self._speculation = (event, task, timing)

    def _maybe_advance(self) -> None:
        """Start a decode of the speech so far when ``incremental_step_s`` of new speech
        came since the last one, none is running and the recognizer is idle."""
        start_us = self._segmenter.burst_start_us
        if start_us is None or (self._advancing is not None and not self._advancing.done()):
            return
        if self._agreement is None or self._agreement[0] != start_us:
            self._agreement = (start_us, LocalAgreement(self.settings.incremental_window_s))
            self._decoded_samples = 0
        held = self._segmenter.held_samples  # in speech: the burst's audio
        step = self.settings.incremental_step_s * SAMPLE_RATE
        if held - self._decoded_samples < (step if self._decoded_samples else 2 * step):
            return
        if self.turns is not None and (self.turns.holder is not None or self.turns.waiting):
            self.counts.incremental_skipped += 1
            self._decoded_samples = held  # try again a step later
            return
        self._decoded_samples = held
        audio = self._segmenter.speech_audio()
        self._advancing = asyncio.get_running_loop().create_task(
            self._advance(self._agreement[1], audio)
        )
        self._advancing.add_done_callback(_retrieve)

    async def _advance(self, agreement: LocalAgreement, audio: np.ndarray) -> None:
        offset_s = agreement.decode_from_s
        try:
            words = await self._decode_words(audio[round(offset_s * SAMPLE_RATE) :], agreement)
        except Exception as error:  # the end of speech decodes what is left, as without
            self.counts.stt_failures += 1
            self._log.error("voice.incremental_failed", error=repr(error))
            return
        shifted = [Word(w.text, w.start_s + offset_s, w.end_s + offset_s) for w in words]
        self.counts.incremental_decodes += 1
        self.counts.committed_words += len(agreement.update(shifted, audio.size / SAMPLE_RATE))

    async def _decode_words(self, audio: np.ndarray, agreement: LocalAgreement) -> list[Word]:
        prompt = self._prompt(agreement)
        transcribe_words = self.stt.transcribe_words  # type: ignore[attr-defined]
        if self.turns is None:
            return list(await transcribe_words(audio, prompt))
        async with self.turns.turn(self.participant_id):
            return list(await transcribe_words(audio, prompt))

    async def _decode_speech(self, start_us: int, audio: np.ndarray, timing: Recognition) -> str:
        """The text of a burst's ``audio``: with committed words, only the audio after them
        is decoded (after the decode still running, whose commits it uses)."""
        agreement = self._agreement
        if agreement is None or agreement[0] != start_us:
            return await self._decode(audio, timing=timing)
        if self._advancing is not None and not self._advancing.done():
            timing.begin()
            await asyncio.gather(asyncio.shield(self._advancing), return_exceptions=True)
        committed = agreement[1]
        if not committed.committed:
            return await self._decode(audio, timing=timing)
        tail = audio[round(committed.decode_from_s * SAMPLE_RATE) :]
        return committed.finish(await self._decode(tail, committed, timing))

    async def _speculate(self, pause: Pause, timing: Recognition) -> str:
        """Recognize the words up to ``pause`` while the hangover runs; end the turn now
        when they end a sentence and no speech came since (``endpoint``)."""
        text = await self._decode_speech(pause.start_us, pause.audio, timing)
        speech_s = (pause.end_us - pause.start_us) / 1e6
        if self._segmenter.pausing(pause) and ends_turn(text, speech_s):
            utterance = self._segmenter.finish(pause.decided_us)
            if utterance is not None:
                self.counts.early_ends += 1
                self._events([utterance])
        return text

    def _drop_speculation(self) -> None:
        if self._speculation is not None and not self._speculation[1].done():
            self._speculation[1].cancel()
        self._speculation = None

    def _prompt(self, agreement: LocalAgreement | None = None) -> str | None:
        """The context-bias prompt, then the words committed so far (Whisper keeps a
        prompt's last tokens, so the committed words survive a long context)."""
        prompt = None
        if self.settings.context_bias and self.context is not None:
            prompt = bias_prompt(self.context(self.participant_id))
        if agreement is not None and agreement.committed:
            prompt = " ".join(part for part in (prompt, agreement.text) if part)
        return prompt or None

    async def _decode(
        self,
        audio: np.ndarray,
        agreement: LocalAgreement | None = None,
        timing: Recognition | None = None,
    ) -> str:
        """The text of ``audio``; ``timing`` notes when the recognizer took it (after the
        wait for a turn: that wait is the queue's, not recognition) and returned."""
        prompt = self._prompt(agreement)
        timing = timing or Recognition()
        if self.turns is None:
            timing.begin()
            text = await self.stt.transcribe(audio, prompt)
        else:
            async with self.turns.turn(self.participant_id):
                timing.begin()
                text = await self.stt.transcribe(audio, prompt)
        timing.done()
        return text.strip()

    async def _recognized(self, utterance: Utterance) -> tuple[str, Recognition]:
        """The utterance's text, and when it was recognized: the speculation's, when it
        recognized the same speech (no voiced chunk since its pause), else a recognition of
        its own."""
        speculation = self._speculation
        if speculation is not None:
            pause, task, timing = speculation
            if (pause.start_us, pause.end_us) == (utterance.start_us, utterance.end_us):
                self._speculation = None
                try:
                    return await asyncio.shield(task), timing
                except asyncio.CancelledError:
                    if not task.cancelled():
                        raise  # this worker is cancelled
        timing = Recognition()
        return await self._decode_speech(utterance.start_us, utterance.audio, timing), timing

    def _interrupt(self, why: str) -> None:
        self.counts.interruptions += 1
        self._log.info("voice.barge_in", why=why)
        self._send(INTERRUPTED_TOPIC, Interrupted())
        self._decided()

    async def _recognize(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._queue:
                await self._transcribe(self._queue.popleft())

    async def _transcribe(self, utterance: Utterance) -> None:
        speech_s = (utterance.end_us - utterance.start_us) / 1e6
        try:
            text, timing = await self._recognized(utterance)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self.counts.stt_failures += 1
            self._log.error("voice.stt_failed", error=repr(error))
            self._decided()
            return
        verdict = self._gate.finished(speech_s, len(text.split()))
        if not text:
            self.counts.empty_transcripts += 1
            self._decided()
            return
        if verdict == "backchannel":
            self.counts.backchannels += 1
            self._log.info("voice.backchannel", text=text)
            self._decided()
            return
        if verdict == "interrupt":
            self._interrupt("words")
        query = UserQuery(
            text,
            utterance.start_us,
            speech_end_us=utterance.end_us,
            transcribed_us=now_us(),
            endpoint_us=utterance.closed_us,
            recognition_start_us=timing.start_us,
            recognition_end_us=timing.end_us,
        )
        self.counts.queries += 1
        self._log.info("voice.query", text=text, speech_s=round(speech_s, 2))
        self._send(QUERY_TOPIC, query)
        self._decided()

    def _send(self, topic: Topic[Any], message: Any) -> None:
        if self.runtime is not None:
            self.runtime.send(
                topic,
                message,
                participant_id=self.participant_id,
                source=VOICE_INPUT_KIND,
            )

    def _release(self) -> None:
        self._drop_speculation()
        if self._advancing is not None:
            self._advancing.cancel()
        self._advancing, self._agreement = None, None
        self._queue.clear()
        self._segmenter.reset()
        self._vad.reset()
        self._pending = np.zeros(0, np.float32)
        self._next_frame = None


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def register_voice_input(
    runtime: AgentRuntime,
    stt: SpeechToText,
    *,
    settings: VoiceSettings = VoiceSettings(),
    context: ContextSource | None = None,
    vad: SileroModel | None = None,
    shard: int = 0,
    shards: int = 1,
) -> None:
    """Host the keyed ``voice`` kind: one ``VoiceInput`` per participant that sends audio,
    sharing the recognizer round-robin (``RecognizerTurns``, registered as
    ``voice-recognizer`` so its queue is in the process's metrics)."""
    model = vad or SileroModel.shared()
    turns = runtime.register("voice-recognizer", RecognizerTurns())
    runtime.register_keyed(
        VOICE_INPUT_KIND,
        VoiceInput,
        shard=shard,
        shards=shards,
        factory=lambda key: VoiceInput(
            key, stt, vad=model, settings=settings, context=context, turns=turns
        ),
    )
