"""``xrmq demo --voice`` and the voice bench: spoken questions through the whole edge stack.

The demo's stack (``demo_config``) plus a ``voice`` process, with the renderer speaking
onto ``audio.out`` (``voice.speech_out``). A sensor note gives the participant context;
each question is spoken by espeak-ng into a WAV, published by ``xrmq mic``'s code path
(``publish_wav``, real time), recognized, answered, and the answer's ``audio.out``
frames are written as WAV files. Per turn it measures, from the end of the speech (the
wall time the last speech sample was sent): the query (the STT text), the first reply
chunk and the first audio frame out. ``text_turn`` sends the same question as a text
``UserQuery`` for comparison. Every wait is for a message, bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import msgspec

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.voice.mic import FrameSender, wav_pcm
from xrmq.actors.voice.pcm import SAMPLE_RATE
from xrmq.actors.voice.playback import AudioRecorder
from xrmq.actors.voice.wer import word_error_rate
from xrmq.schemas import AudioFrame, ConversationContextUpdate, ResponseOutput, UserQuery
from xrmq.topics import AUDIO_OUT_TOPIC, QUERY_TOPIC, VOICE_OUTPUT_TOPIC, context_topic

from .config import EdgeConfig, ProcessConfig
from .demo import demo_config
from .private_stack import PrivateStack

TURN_TIMEOUT_S = 60.0
PARTICIPANT = "alice"
CONTEXT_NOTE = (
    "The spare key is in drawer 12 of the blue cabinet in lab 3. "
    "The kettle in lab 3 is set to 85 degrees. "
    "The fire drill starts at 14:30 at gate B."
)
QUESTIONS = (
    "Where did I leave the spare key?",
    "What temperature is the kettle set to?",
    "When does the fire drill start?",
)
LEAD_S = 0.3


def voice_config() -> EdgeConfig:
    """The demo's stack with a ``voice`` process and speech out on ``audio.out``."""
    base = demo_config()
    processes = {**base.processes, "voice": ProcessConfig(roles=["voice"], after=["context"])}
    supervisor = msgspec.structs.replace(base.supervisor, ready_timeout_s=60.0)
    voice = msgspec.structs.replace(base.voice, speech_out=True)
    return msgspec.structs.replace(base, processes=processes, voice=voice, supervisor=supervisor)


@dataclass
class VoiceTurn:
    script: str
    heard: str = ""
    wer: float = 1.0
    to_text_s: float = 0.0
    """End of speech -> the query (VAD hangover + speech-to-text)."""
    to_chunk_s: float = 0.0
    """End of speech (or, for a text turn, the query) -> first reply chunk."""
    to_audio_s: float = 0.0
    """End of speech (or the query) -> first audio frame out."""
    answer_wav: Path | None = None


class Probe(Agent):
    """Sees queries, reply chunks and audio frames for the session's participant."""

    def __init__(self) -> None:
        self.query: tuple[float, str, str] | None = None
        self.chunk_at: dict[str, float] = {}
        self.audio_at: float | None = None
        self.changed = asyncio.Event()

    @subscribe(QUERY_TOPIC)
    async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
        self.query = (time.time(), ctx.metadata.message_id, query.text)
        self.changed.set()

    @subscribe(VOICE_OUTPUT_TOPIC)
    async def on_output(self, output: ResponseOutput, ctx: RuntimeContext) -> None:
        if output.request_id is not None:
            self.chunk_at.setdefault(output.request_id, time.time())
            self.changed.set()

    @subscribe(AUDIO_OUT_TOPIC)
    async def on_audio(self, frame: AudioFrame, ctx: RuntimeContext) -> None:
        if self.audio_at is None:
            self.audio_at = time.time()
            self.changed.set()

    def reset(self) -> None:
        self.query, self.audio_at = None, None

    async def until(self, predicate, what: str) -> None:
        deadline = time.monotonic() + TURN_TIMEOUT_S
        while not predicate():
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"voice session: no {what} within {TURN_TIMEOUT_S:.0f} s")
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                pass


def speak(text: str, directory: Path, name: str) -> Path:
    target = directory / f"{name}.wav"
    subprocess.run(["espeak-ng", "-s", "165", "-w", str(target), text], check=True)
    return target


class VoiceSession:
    """One connected session on a running stack (``bus``); see the module docstring."""

    def __init__(self, bus: str, wav_dir: Path) -> None:
        self.runtime = AgentRuntime(bus, name="voice-session")
        self.probe = self.runtime.register("probe", Probe(), participant_id=PARTICIPANT)
        self.recorder = self.runtime.register(
            "recorder", AudioRecorder(wav_dir / "answers"), participant_id=PARTICIPANT
        )
        self.wav_dir = wav_dir

    async def __aenter__(self) -> VoiceSession:
        await self.runtime.start()
        await self.runtime.publish(
            context_topic("notes"),
            ConversationContextUpdate(CONTEXT_NOTE),
            participant_id=PARTICIPANT,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runtime.stop()

    async def voice_turn(self, index: int, text: str) -> VoiceTurn:
        probe, recorder = self.probe, self.recorder
        probe.reset()
        written = len(recorder.written)
        pcm = wav_pcm(speak(text, self.wav_dir, f"question-{index}"), lead_s=LEAD_S, tail_s=1.0)
        speech_s = len(pcm) / (2 * SAMPLE_RATE) - LEAD_S - 1.0
        sender = FrameSender(self.runtime, PARTICIPANT)
        sending = asyncio.ensure_future(sender.send(pcm))
        started = time.time()
        await probe.until(lambda: probe.query is not None, "query")
        assert probe.query is not None
        end_of_speech = started + LEAD_S + speech_s
        heard_at, request_id, heard = probe.query
        await probe.until(
            lambda: request_id in probe.chunk_at and probe.audio_at is not None, "reply audio"
        )
        await sending
        await asyncio.wait_for(recorder.wait_written(written + 1), TURN_TIMEOUT_S)
        assert probe.audio_at is not None
        return VoiceTurn(
            text,
            heard,
            word_error_rate(text, heard),
            heard_at - end_of_speech,
            probe.chunk_at[request_id] - end_of_speech,
            probe.audio_at - end_of_speech,
            recorder.written[-1],
        )

    async def text_turn(self, text: str) -> VoiceTurn:
        probe, recorder = self.probe, self.recorder
        probe.reset()
        written = len(recorder.written)
        sent = time.time()
        await self.runtime.publish(
            QUERY_TOPIC, UserQuery(text, int(sent * 1e6)), participant_id=PARTICIPANT
        )
        await probe.until(lambda: probe.query is not None, "query")
        assert probe.query is not None
        request_id = probe.query[1]
        await probe.until(
            lambda: request_id in probe.chunk_at and probe.audio_at is not None, "reply audio"
        )
        await asyncio.wait_for(recorder.wait_written(written + 1), TURN_TIMEOUT_S)
        assert probe.audio_at is not None
        return VoiceTurn(
            text, text, 0.0, 0.0, probe.chunk_at[request_id] - sent, probe.audio_at - sent
        )


async def run_voice_demo(out: TextIO = sys.stdout, *, verbose: bool = False) -> int:
    """``xrmq demo --voice``: 0 when every spoken question was heard, answered and spoken."""
    from xrmq.actors.voice.stt import bundled_model_dir

    try:
        bundled_model_dir()
    except Exception as error:
        out.write(f"xrmq demo --voice: {error}\n")
        return 1
    out.write("xrmq demo --voice: starting the edge stack with a voice process...\n")
    out.flush()
    directory = Path(tempfile.mkdtemp(prefix="xrmq-voice-demo-"))
    stack = PrivateStack(voice_config(), echo=sys.stderr if verbose else None)
    turns: list[VoiceTurn] = []
    try:
        async with stack, VoiceSession(stack.bus, directory) as session:
            for index, question in enumerate(QUESTIONS):
                turn = await session.voice_turn(index, question)
                turns.append(turn)
                out.write(
                    f"[{PARTICIPANT}] said:  {turn.script}\n"
                    f"[{PARTICIPANT}] heard: {turn.heard} (WER {turn.wer:.2f})\n"
                    f"  end of speech -> text {turn.to_text_s * 1000:.0f} ms, "
                    f"-> first chunk {turn.to_chunk_s * 1000:.0f} ms, "
                    f"-> first audio frame {turn.to_audio_s * 1000:.0f} ms; "
                    f"answer: {turn.answer_wav}\n"
                )
                out.flush()
    except (TimeoutError, RuntimeError) as error:
        out.write(
            f"\nxrmq demo --voice: FAILED: {error}\nlast lines of the stack:\n{stack.tail(15)}\n"
        )
        return 1
    mean_wer = sum(turn.wer for turn in turns) / len(turns)
    out.write(
        f"xrmq demo --voice: {len(turns)} spoken turns, mean WER {mean_wer:.2f}; "
        f"answers in {directory}\n"
    )
    if mean_wer > 0.5:
        out.write("xrmq demo --voice: FAILED: the recognizer heard too little\n")
        return 1
    out.write("xrmq demo --voice: ok\n")
    return 0
