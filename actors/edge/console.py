"""``xrmq console``: talk to a box through this machine's microphone and speaker.

One command instead of ``xrmq mic`` + ``xrmq listen`` + a hand-edited config: it joins a
running box's bus (``--bus``), or starts a private stack with a voice process and speech
out (``--private-stack``: ``voice_demo.voice_config()``), sends the microphone as
``audio.in`` frames for ``--participant`` and plays the box's ``audio.out`` frames on the
speaker. It shows what the box heard (the ``UserQuery``), the answer as it streams, and
each turn's latency from the end of speech to the first audio frame; speaking over the
answer barges in (the box's voice gate cuts the playback, shown as ``<barged in>``).

The end of speech is the client's: the time the last voiced frame (RMS above
``VOICED_RMS``) was sent before the box's query arrived, so the latency is what the
person hears, VAD hangover included.

Without audio hardware: ``--wav-in FILE`` (repeatable) speaks WAV files in real time
instead of the microphone, and ``--wav-out DIR`` writes each answer as a WAV instead of
(or as well as, with ``--speaker``) playing it. A file after the first is spoken once the
previous answer has finished, or, with ``--barge-in``, as soon as it starts playing;
the command ends once every file's answer has finished playing (exit 0), or says which
did not within ``--timeout`` (exit 1). A missing PortAudio library or device is one line
with a hint, exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, run, subscribe
from xrmq.actors.voice.mic import FrameSender, forward_blocks, input_stream, wav_pcm
from xrmq.actors.voice.pcm import FRAME_MS, SAMPLE_RATE, frames, pcm16_to_float
from xrmq.actors.voice.playback import AudioRecorder
from xrmq.schemas import AudioFrame, AudioPlayback, Interrupted, ResponseOutput, UserQuery
from xrmq.topics import (
    AUDIO_OUT_TOPIC,
    AUDIO_PLAYBACK_TOPIC,
    INTERRUPTED_TOPIC,
    QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
)

from .bus_commands import require_broker

VOICED_RMS = 0.01
"""A sent frame louder than this (RMS of samples in [-1, 1], about -40 dBFS) is speech."""
HARDWARE_HINT = "--wav-in FILE and --wav-out DIR run the console without audio hardware"


class AudioUnavailable(RuntimeError):
    """The microphone or speaker cannot be used on this machine."""


@dataclass
class Turns:
    """What the console has seen, for waits and the summary."""

    last_voiced_at: float = 0.0
    """Monotonic time the last voiced frame was sent."""
    heard: list[str] = field(default_factory=list)
    started: int = 0
    """Answers whose audio started playing."""
    done: int = 0
    """Answers whose audio finished playing (completed or cut)."""
    cut: int = 0
    latencies_ms: list[float] = field(default_factory=list)


class ConsoleView(Agent):
    """Prints the participant's side of the conversation (see the module docstring)."""

    def __init__(self, turns: Turns, out: TextIO) -> None:
        self.turns = turns
        self.out = out
        self.changed = asyncio.Event()
        self._speech_end: float | None = None
        self._answering = False
        self._playing_since: float | None = None
        self._interrupted = False

    def _say(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        self.changed.set()

    @subscribe(QUERY_TOPIC)
    async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
        self._speech_end = self.turns.last_voiced_at
        self.turns.heard.append(query.text)
        self._close_answer()
        self._say(f"[{ctx.participant_id}] heard: {query.text}\n")

    @subscribe(VOICE_OUTPUT_TOPIC)
    async def on_output(self, output: ResponseOutput, ctx: RuntimeContext) -> None:
        if output.kind == "withdraw":
            return
        if not self._answering and (output.text or not output.final):
            self._answering = True
            self._say("[assistant] ")
        if output.text:
            self._say(output.text)
        if output.final or output.response_id is None:
            self._close_answer()

    def _close_answer(self) -> None:
        if self._answering:
            self._answering = False
            self._say("\n")

    @subscribe(AUDIO_OUT_TOPIC)
    async def on_audio(self, frame: AudioFrame, ctx: RuntimeContext) -> None:
        if self._playing_since is None:
            self._playing_since = time.monotonic()
            self.turns.started += 1
            if self._speech_end is not None:
                latency = (self._playing_since - self._speech_end) * 1000
                self.turns.latencies_ms.append(latency)
                self._speech_end = None
                self._close_answer()
                self._say(f"  end of speech -> first audio {latency:.0f} ms\n")
            self.changed.set()

    @subscribe(INTERRUPTED_TOPIC)
    async def on_interrupted(self, message: Interrupted, ctx: RuntimeContext) -> None:
        if self._playing_since is not None:
            self._interrupted = True

    @subscribe(AUDIO_PLAYBACK_TOPIC)
    async def on_playback(self, message: AudioPlayback, ctx: RuntimeContext) -> None:
        if message.state != "done" or self._playing_since is None:
            return
        played = time.monotonic() - self._playing_since
        self._playing_since = None
        self.turns.done += 1
        if self._interrupted:
            self._interrupted = False
            self.turns.cut += 1
            self._close_answer()
            self._say(f"  <barged in: playback cut after {played:.1f} s>\n")
        self.changed.set()

    async def until(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{what}: not within {timeout:g} s")
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                pass


class Speaker:
    """Sends PCM16 as ``audio.in`` frames in real time, noting when speech was last sent."""

    def __init__(self, runtime: AgentRuntime, participant: str, turns: Turns) -> None:
        self.sender = FrameSender(runtime, participant, realtime=True)
        self.turns = turns

    async def send(self, pcm: bytes) -> None:
        for chunk in frames(pcm, SAMPLE_RATE, FRAME_MS):
            await self.sender.send(chunk)
            if float(np.sqrt(np.mean(pcm16_to_float(chunk) ** 2))) > VOICED_RMS:
                self.turns.last_voiced_at = time.monotonic()


def _sounddevice(what: str) -> Any:
    try:
        import sounddevice
    except (ImportError, OSError) as error:  # OSError: the PortAudio library is missing
        raise AudioUnavailable(
            f"no {what}: sounddevice needs the PortAudio library "
            f"(apt-get install libportaudio2; pip install sounddevice): {_first_line(error)}"
        ) from None
    return sounddevice


def speaker_output() -> Any:
    """A frame callback playing on the default output device, or ``AudioUnavailable``."""
    sounddevice = _sounddevice("speaker")
    try:
        stream: Any = sounddevice.RawOutputStream(samplerate=SAMPLE_RATE, channels=1, dtype="int16")
        stream.start()
    except Exception as error:  # PortAudio missing, no device, device busy
        raise AudioUnavailable(f"no speaker: {_first_line(error)}") from None

    def play(participant: str, frame: AudioFrame) -> None:
        stream.write(frame.pcm)

    return play


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


async def speak_microphone(speaker: Speaker, stop: asyncio.Event) -> None:
    """The default microphone until ``stop``, or ``AudioUnavailable``."""
    sounddevice = _sounddevice("microphone")
    try:
        stream, blocks = input_stream(sounddevice)
    except Exception as error:
        raise AudioUnavailable(f"no microphone: {_first_line(error)}") from None
    speaker.sender.realtime = False  # the microphone paces itself
    with stream:
        await forward_blocks(blocks, speaker.send, stop)


def _answered(turns: Turns, count: int, started: bool) -> bool:
    return (turns.started if started else turns.done) >= count


async def speak_files(
    view: ConsoleView, speaker: Speaker, files: list[str], barge_in: bool, timeout: float
) -> None:
    """Speak each file; the next once the previous answer finished (or, with ``barge_in``,
    started playing); return once every answer finished playing."""
    turns = view.turns
    for index, path in enumerate(files):
        if index:
            await view.until(
                partial(_answered, turns, index, barge_in),
                timeout,
                f"the answer to {files[index - 1]}",
            )
        await speaker.send(wav_pcm(path, lead_s=0.3, tail_s=1.0))
    await view.until(
        lambda: turns.done >= len(files), timeout, f"{files[-1]}'s answer to finish playing"
    )


async def console(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run the console on ``args.bus`` (or a private stack); see the module docstring."""
    on_frame = speaker_output() if (args.speaker or args.wav_out is None) else None
    if args.private_stack:
        from .private_stack import PrivateStack
        from .voice_demo import voice_config

        out.write("xrmq console: starting a private stack with a voice process...\n")
        out.flush()
        async with PrivateStack(voice_config()) as stack:
            return await _session(args, stack.bus, on_frame, out)
    require_broker(args.bus)
    return await _session(args, args.bus, on_frame, out)


async def _session(args: argparse.Namespace, bus: str, on_frame: Any, out: TextIO) -> int:
    turns = Turns()
    runtime = AgentRuntime(bus, name="xrmq-console")
    view = runtime.register("console", ConsoleView(turns, out), participant_id=args.participant)
    recorder = runtime.register(
        "speaker", AudioRecorder(args.wav_out, on_frame=on_frame), participant_id=args.participant
    )
    async with runtime:
        speaker = Speaker(runtime, args.participant, turns)
        source = ", ".join(args.wav_in) if args.wav_in else "the microphone"
        out.write(
            f"xrmq console: ready participant={args.participant} bus={bus} "
            f"(speaking {source}{'' if args.wav_in else '; Ctrl-C stops'})\n"
        )
        out.flush()
        if args.wav_in:
            await speak_files(view, speaker, args.wav_in, args.barge_in, args.timeout)
        else:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
            await speak_microphone(speaker, stop)
    for path in recorder.written:
        out.write(f"xrmq console: wrote {path}\n")
    if turns.latencies_ms:
        middle = sorted(turns.latencies_ms)[len(turns.latencies_ms) // 2]
        out.write(
            f"xrmq console: {len(turns.heard)} heard, {turns.done} answers played "
            f"({turns.cut} cut by barge-in); end of speech -> first audio p50 {middle:.0f} ms\n"
        )
    out.flush()
    return 0


def run_console(args: argparse.Namespace) -> int:
    if args.wav_in:
        missing = [path for path in args.wav_in if not Path(path).is_file()]
        if missing:
            raise ValueError(f"--wav-in: no such file: {missing[0]}")
    try:
        return run(console(args))
    except AudioUnavailable as error:
        print(f"xrmq console: {error}; {HARDWARE_HINT}", file=sys.stderr)
        return 1
    except TimeoutError as error:
        print(f"xrmq console: FAILED: {error}", file=sys.stderr)
        return 1
