"""``xrmq demo --voice`` and the voice bench: spoken questions through the whole edge stack.

The demo's stack (``demo_config``) plus a ``voice`` process, with the renderer speaking
onto ``audio.out`` (``voice.speech_out``). A sensor gives the participant three facts, one
note each (``CONTEXT_NOTES``), and the session waits until the context holds them; each
question (``SPOKEN``) is spoken by espeak-ng into a WAV, published by ``xrmq mic``'s code
path (real time), recognized, answered, and the answer's ``audio.out`` frames are written
as WAV files. Per turn it measures, from the end of the speech (the wall time the last
speech sample was sent): the query (the STT text), the first reply chunk and the first
audio frame out. ``text_turn`` sends the same question as a text ``UserQuery`` for
comparison. Every wait is for a message, bounded by a timeout.

The demo is honest about what it shows: it prints a line from its first second on (each
process as it becomes ready: Whisper takes seconds to load), each answer's text, and
fails (exit 1, a ``FAILED:`` line naming the question) unless each answer holds the fact
its question asks for and none of the other questions' facts (``answer_problem``): the
built-in model answers the question asked from the matching note, not every fact it has.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TextIO, cast

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
from .demo_observers import StackObserver
from .private_stack import PrivateStack

TURN_TIMEOUT_S = 60.0
PARTICIPANT = "alice"
CONTEXT_NOTES = (
    "The spare key is in drawer 12 of the blue cabinet in lab 3.",
    "The kettle in lab 3 is set to 85 degrees.",
    "The fire drill starts at 14:30 at gate B.",
)
"""The sensor's facts, one note each: the model answers from the note a question matches."""


@dataclass(frozen=True)
class Spoken:
    """A question to speak and the fact its answer must hold."""

    question: str
    fact: str


SPOKEN = (
    Spoken("Where did I leave the spare key?", "drawer 12"),
    Spoken("What temperature is the kettle set to?", "85 degrees"),
    Spoken("When does the fire drill start?", "14:30"),
)
QUESTIONS = tuple(spoken.question for spoken in SPOKEN)
LEAD_S = 0.3


def answer_problem(answer: str, fact: str, others: tuple[str, ...] = ()) -> str | None:
    """Why ``answer`` does not answer its question: it lacks ``fact``, or it recites one of
    ``others`` (the facts other questions ask for); None when it answers."""
    if not answer.strip():
        return "the answer was empty"
    if fact not in answer:
        return f"the answer does not hold {fact!r}"
    recited = [other for other in others if other != fact and other in answer]
    if recited:
        return f"the answer also recites {', '.join(map(repr, recited))}, not asked for"
    return None


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
    answer: str = ""
    """The reply's text, all its chunks."""


class Probe(Agent):
    """Sees queries, reply chunks and audio frames for the session's participant."""

    def __init__(self) -> None:
        self.query: tuple[float, str, str] | None = None
        self.chunk_at: dict[str, float] = {}
        self.texts: dict[str, list[str]] = {}
        self.final: set[str] = set()
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
            self.texts.setdefault(output.request_id, []).append(output.text)
            if output.final:
                self.final.add(output.request_id)
            self.changed.set()

    def answer(self, request_id: str) -> str:
        return "".join(self.texts.get(request_id, ()))

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


def _holds(texts: list[str], note: str) -> bool:
    return any(note in text for text in texts)


class VoiceSession:
    """One connected session on a running stack (``bus``, of ``config``); see the module
    docstring. Entering gives the participant ``CONTEXT_NOTES`` and waits until the
    context holds them."""

    def __init__(self, bus: str, wav_dir: Path, config: EdgeConfig | None = None) -> None:
        self.runtime = AgentRuntime(bus, name="voice-session")
        self.probe = self.runtime.register("probe", Probe(), participant_id=PARTICIPANT)
        self.observer = self.runtime.register("observer", StackObserver(config or voice_config()))
        self.recorder = self.runtime.register(
            "recorder", AudioRecorder(wav_dir / "answers"), participant_id=PARTICIPANT
        )
        self.wav_dir = wav_dir

    async def __aenter__(self) -> VoiceSession:
        await self.runtime.start()
        seen = self.observer.seen[(PARTICIPANT, "notes")]
        for note in CONTEXT_NOTES:
            await self.runtime.publish(
                context_topic("notes"),
                ConversationContextUpdate(note),
                participant_id=PARTICIPANT,
                source="sensor",
            )
            await self.observer.until(
                partial(_holds, seen, note),
                TURN_TIMEOUT_S,
                f"the note {note!r} reaching the context",
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
        await probe.until(lambda: request_id in probe.final, "end of the reply")
        assert probe.audio_at is not None
        return VoiceTurn(
            text,
            heard,
            word_error_rate(text, heard),
            heard_at - end_of_speech,
            probe.chunk_at[request_id] - end_of_speech,
            probe.audio_at - end_of_speech,
            recorder.written[-1],
            probe.answer(request_id),
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
        await probe.until(lambda: request_id in probe.final, "end of the reply")
        assert probe.audio_at is not None
        return VoiceTurn(
            text,
            text,
            0.0,
            0.0,
            probe.chunk_at[request_id] - sent,
            probe.audio_at - sent,
            recorder.written[-1],
            probe.answer(request_id),
        )


class _Progress:
    """The private stack's echo: one line per process as it becomes ready, nothing else."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.started = time.monotonic()

    def write(self, text: str) -> int:
        if text.startswith("xrmq up: started "):
            label = text.removeprefix("xrmq up: started ").split(" ", 1)[0]
            self.say(f"  {label} ready ({time.monotonic() - self.started:.1f} s)")
        return len(text)

    def say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def flush(self) -> None:
        self.out.flush()


async def run_voice_demo(out: TextIO = sys.stdout, *, verbose: bool = False) -> int:
    """``xrmq demo --voice``: 0 when every spoken question was heard and answered with the
    fact it asks for; 1 (a ``FAILED:`` line) otherwise."""
    progress = _Progress(out)
    progress.say("xrmq demo --voice: checking the bundled Whisper weights (SHA-256)...")
    from xrmq.actors.voice.stt import bundled_model_dir

    try:
        bundled_model_dir()
    except Exception as error:
        progress.say(f"xrmq demo --voice: {error}")
        return 1
    progress.say(
        "xrmq demo --voice: starting the edge stack with a voice process "
        "(the voice process loads Whisper)..."
    )
    directory = Path(tempfile.mkdtemp(prefix="xrmq-voice-demo-"))
    config = voice_config()
    stack = PrivateStack(config, echo=sys.stderr if verbose else cast(TextIO, progress))
    turns: list[VoiceTurn] = []
    others = tuple(spoken.fact for spoken in SPOKEN)
    try:
        async with stack:
            progress.say(f"  sensor -> notes[{PARTICIPANT}]: {len(CONTEXT_NOTES)} facts")
            async with VoiceSession(stack.bus, directory, config) as session:
                for index, spoken in enumerate(SPOKEN):
                    progress.say(f"[{PARTICIPANT}] says:  {spoken.question} (espeak-ng)")
                    turn = await session.voice_turn(index, spoken.question)
                    turns.append(turn)
                    progress.say(
                        f"[{PARTICIPANT}] heard: {turn.heard} (WER {turn.wer:.2f})\n"
                        f"[assistant] answer: {turn.answer}\n"
                        f"  end of speech -> text {turn.to_text_s * 1000:.0f} ms, "
                        f"-> first chunk {turn.to_chunk_s * 1000:.0f} ms, "
                        f"-> first audio frame {turn.to_audio_s * 1000:.0f} ms; "
                        f"spoken answer: {turn.answer_wav}"
                    )
                    problem = answer_problem(turn.answer, spoken.fact, others)
                    if problem is not None:
                        progress.say(
                            f"xrmq demo --voice: FAILED: {spoken.question!r}: {problem}: "
                            f"{turn.answer!r}"
                        )
                        return 1
    except (TimeoutError, RuntimeError) as error:  # DemoFailure is a RuntimeError
        progress.say(
            f"\nxrmq demo --voice: FAILED: {error}\nlast lines of the stack:\n{stack.tail(15)}"
        )
        return 1
    mean_wer = sum(turn.wer for turn in turns) / len(turns)
    progress.say(
        f"xrmq demo --voice: {len(turns)} spoken turns, each answered with its fact, "
        f"mean WER {mean_wer:.2f}; spoken answers in {directory}"
    )
    if mean_wer > 0.5:
        progress.say("xrmq demo --voice: FAILED: the recognizer heard too little")
        return 1
    progress.say("xrmq demo --voice: ok")
    return 0
