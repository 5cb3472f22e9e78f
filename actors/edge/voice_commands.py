"""``xrmq listen``, ``xrmq mic`` and ``xrmq console``: voice clients of a running bus.

``xrmq listen`` connects a voice renderer and renders what it hears (``--sink console`` or
``espeak``), or, with ``--sink wav|speaker``, saves or plays the synthesized ``audio.out``
frames. ``xrmq mic`` publishes a WAV file (or the microphone) on ``audio.in``.
``xrmq console`` does both for one participant and shows the conversation (``console``).

The renderer also follows the standard query and interrupted topics, as the voice
process of an edge box does, so a new query or a barge-in drops stale replies. It
prints ``xrmq listen: ready ...`` on stdout once its subscriptions are live, shows each
reply on one line as it streams (console), prints ``xrmq listen: wrote PATH`` for each
WAV file (``--wav-dir``), and stops cleanly on SIGINT/SIGTERM.

``--sink espeak`` checks the audio device before ``ready``: without a sound card it
says so in one line (espeak-ng's error and the ``--wav-dir`` hint) and exits 1. A sink
that fails later stops it: it prints the error with espeak-ng's own error lines and
exits 1. A renderer in a box logs a failed segment and goes on;
a listener whose only job is to render has nothing to go on with, and went silent after
``ready`` when it did.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from xrmq.actors.arguments import name, seconds
from xrmq.actors.edge.bus_commands import add_bus_argument, require_broker
from xrmq.actors.runtime import AgentRuntime, run
from xrmq.actors.voice.ordering import ResponseEnded, Segment
from xrmq.actors.voice.renderer import VoiceRenderer
from xrmq.actors.voice.sinks import (
    DEFAULT_WORDS_PER_MINUTE,
    ConsoleSink,
    EspeakSink,
    Sink,
    SinkUnavailableError,
)
from xrmq.schemas import ResponseOutput
from xrmq.topics import INTERRUPTED_TOPIC, QUERY_TOPIC, VOICE_OUTPUT_TOPIC, Topic


def add_commands(subparsers: Any) -> None:
    listen = subparsers.add_parser(
        "listen", help="render voice output (console text or espeak-ng speech)"
    )
    add_bus_argument(listen)
    listen.add_argument(
        "--topic",
        type=name,
        default=VOICE_OUTPUT_TOPIC.name,
        help="ResponseOutput topic (default: %(default)s)",
    )
    listen.add_argument(
        "--participant", type=name, help="render only this participant (default: everyone)"
    )
    listen.add_argument(
        "--sink",
        choices=("console", "espeak", "wav", "speaker"),
        default="console",
        help="console/espeak render the text topic; wav/speaker save or play audio.out",
    )
    listen.add_argument(
        "--wav-dir", help="with --sink espeak or wav: write one WAV per response here"
    )
    listen.add_argument(
        "--wpm",
        type=float,
        default=DEFAULT_WORDS_PER_MINUTE,
        help="speaking rate in words per minute",
    )
    listen.add_argument(
        "--idle-timeout",
        type=seconds,
        default=10.0,
        help="seconds before an abandoned stream is closed",
    )
    listen.set_defaults(func=run_listen)
    mic = subparsers.add_parser("mic", help="publish microphone audio (or a WAV file) on audio.in")
    add_bus_argument(mic)
    mic.add_argument("--participant", type=name, required=True, help="whose audio this is")
    mic.add_argument(
        "--wav", action="append", help="publish this WAV file in real time (repeatable)"
    )
    mic.add_argument("--fast", action="store_true", help="with --wav: do not pace in real time")
    mic.set_defaults(func=run_mic)
    console = subparsers.add_parser(
        "console", help="talk to the box: microphone in, speaker out, what it heard and said"
    )
    add_bus_argument(console)
    console.add_argument(
        "--participant", type=name, default="console", help="who speaks (default: %(default)s)"
    )
    console.add_argument(
        "--private-stack",
        dest="private_stack",
        action="store_true",
        help="start an edge stack with a voice process on a private bus instead of using --bus",
    )
    console.add_argument(
        "--wav-in",
        action="append",
        metavar="FILE",
        help="speak this WAV file instead of the microphone (repeatable)",
    )
    console.add_argument(
        "--wav-out", metavar="DIR", help="write each answer as a WAV here instead of playing it"
    )
    console.add_argument(
        "--speaker", action="store_true", help="with --wav-out: play the answers as well"
    )
    console.add_argument(
        "--barge-in",
        action="store_true",
        help="with several --wav-in: speak each next file as soon as the answer starts playing",
    )
    console.add_argument(
        "--timeout",
        type=seconds,
        default=60.0,
        help="with --wav-in: seconds to wait for each answer (default: %(default)s)",
    )
    console.set_defaults(func=run_console_command)


def run_console_command(args: argparse.Namespace) -> int:
    from .console import run_console  # numpy: the voice extra

    return run_console(args)


def build_sink(args: argparse.Namespace) -> Sink:
    """The sink the arguments ask for; ``ValueError`` for contradictory options."""
    if args.sink == "console":
        if args.wav_dir is not None:
            raise ValueError("--wav-dir: only with --sink espeak")
        return ConsoleSink(words_per_minute=args.wpm, one_line=True)
    return EspeakSink(
        wav_dir=args.wav_dir,
        words_per_minute=args.wpm,
        on_written=lambda path: print(f"xrmq listen: wrote {path}", flush=True),
    )


class FailureWatch:
    """A sink that plays through ``sink``, keeps its first failure (``error``) and then sets
    ``stop``; the failure still reaches the renderer, which logs it."""

    def __init__(self, sink: Sink, stop: asyncio.Event) -> None:
        self.sink = sink
        self.stop = stop
        self.error: Exception | None = None

    async def play(self, segment: Segment) -> None:
        await self._watch(self.sink.play(segment))

    async def end(self, ended: ResponseEnded) -> None:
        await self._watch(self.sink.end(ended))

    async def _watch(self, call: Any) -> None:
        try:
            await call
        except Exception as error:
            if self.error is None:
                self.error = error
                self.stop.set()
            raise


def run_listen(args: argparse.Namespace) -> int:
    if args.sink in ("wav", "speaker"):
        return _listen_audio(args)
    require_broker(args.bus)
    topic = Topic(args.topic, ResponseOutput)
    try:
        sink = build_sink(args)
        if isinstance(sink, EspeakSink):
            run(sink.check_device())
    except SinkUnavailableError as error:
        print(f"xrmq listen: {error}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    watch = FailureWatch(sink, stop)
    renderer = VoiceRenderer(
        watch,
        output_topic=topic,
        query_topic=QUERY_TOPIC,
        interrupted_topic=INTERRUPTED_TOPIC,
        idle_timeout_s=args.idle_timeout,
    )
    run(_listen(args.bus, renderer, args.participant, stop))
    if watch.error is not None:
        print(f"xrmq listen: the {args.sink} sink failed: {watch.error}", file=sys.stderr)
        return 1
    return 0


async def _listen(
    bus: str, renderer: VoiceRenderer, participant_id: str | None, stop: asyncio.Event
) -> None:
    """Render until ``stop`` is set: by SIGINT/SIGTERM, or by the sink's failure."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    runtime = AgentRuntime(bus)
    runtime.register("voice_renderer", renderer, participant_id=participant_id)
    async with runtime:
        print(
            f"xrmq listen: ready topic={renderer.output_topic.name} "
            f"participant={participant_id or '*'} "
            f"bus={runtime.address.subscribe}",
            flush=True,
        )
        await stop.wait()


def _listen_audio(args: argparse.Namespace) -> int:
    from xrmq.actors.voice.playback import AudioRecorder, speaker_player  # numpy: the voice extra

    if args.sink == "wav" and args.wav_dir is None:
        raise ValueError("--sink wav: needs --wav-dir DIR")
    require_broker(args.bus)
    on_frame = speaker_player() if args.sink == "speaker" else None
    recorder = AudioRecorder(args.wav_dir, on_frame=on_frame)

    async def main() -> None:
        stop = _stop_on_signals()
        runtime = AgentRuntime(args.bus)
        runtime.register("audio_listener", recorder, participant_id=args.participant)
        async with runtime:
            print(
                f"xrmq listen: ready topic=audio.out participant={args.participant or '*'} "
                f"bus={runtime.address.subscribe}",
                flush=True,
            )
            await stop.wait()
        for participant in list(recorder.last_frame_at):
            recorder.flush(participant)
        for path in recorder.written:
            print(f"xrmq listen: wrote {path}", flush=True)

    run(main())
    return 0


def run_mic(args: argparse.Namespace) -> int:
    from xrmq.actors.voice.mic import publish_device, publish_wav  # numpy: the voice extra

    require_broker(args.bus, endpoint="publish")

    async def main() -> None:
        runtime = AgentRuntime(args.bus)
        async with runtime:
            print(
                f"xrmq mic: ready participant={args.participant} bus={runtime.address.publish}",
                flush=True,
            )
            if args.wav:
                for path in args.wav:
                    sent = await publish_wav(
                        runtime, path, args.participant, realtime=not args.fast
                    )
                    print(f"xrmq mic: sent {path} frames={sent}", flush=True)
            else:
                await publish_device(runtime, args.participant, _stop_on_signals())

    run(main())
    return 0


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return stop
