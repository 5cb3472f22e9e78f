"""``xrmq listen``: connect a voice renderer to a running bus and render what it hears.

The renderer also follows the standard query and interrupted topics, as the voice
process of an edge box does, so a new query or a barge-in drops stale replies. It
prints ``xrmq listen: ready ...`` on stdout once its subscriptions are live, shows each
reply on one line as it streams (console), prints ``xrmq listen: wrote PATH`` for each
WAV file (``--wav-dir``), and stops cleanly on SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from xrmq.actors.runtime import AgentRuntime, run
from xrmq.actors.runtime.commands import add_bus_argument, require_broker
from xrmq.schemas import ResponseOutput
from xrmq.topics import INTERRUPTED_TOPIC, QUERY_TOPIC, VOICE_OUTPUT_TOPIC, Topic

from .renderer import VoiceRenderer
from .sinks import DEFAULT_WORDS_PER_MINUTE, ConsoleSink, EspeakSink, Sink, SinkUnavailableError


def add_commands(subparsers: Any) -> None:
    listen = subparsers.add_parser(
        "listen", help="render voice output (console text or espeak-ng speech)"
    )
    add_bus_argument(listen)
    listen.add_argument(
        "--topic",
        default=VOICE_OUTPUT_TOPIC.name,
        help="ResponseOutput topic (default: %(default)s)",
    )
    listen.add_argument("--participant", help="render only this participant (default: everyone)")
    listen.add_argument(
        "--sink", choices=("console", "espeak"), default="console", help="where output goes"
    )
    listen.add_argument(
        "--wav-dir", help="with --sink espeak: write one WAV per response here instead of playing"
    )
    listen.add_argument(
        "--wpm",
        type=float,
        default=DEFAULT_WORDS_PER_MINUTE,
        help="speaking rate in words per minute",
    )
    listen.add_argument(
        "--idle-timeout",
        type=float,
        default=10.0,
        help="seconds before an abandoned stream is closed",
    )
    listen.set_defaults(func=run_listen)


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


def run_listen(args: argparse.Namespace) -> int:
    require_broker(args.bus)
    topic = Topic(args.topic, ResponseOutput)
    try:
        sink = build_sink(args)
    except SinkUnavailableError as error:
        print(f"xrmq listen: {error}", file=sys.stderr)
        return 1
    renderer = VoiceRenderer(
        sink,
        output_topic=topic,
        query_topic=QUERY_TOPIC,
        interrupted_topic=INTERRUPTED_TOPIC,
        idle_timeout_s=args.idle_timeout,
    )
    run(_listen(args.bus, renderer, args.participant))
    return 0


async def _listen(bus: str, renderer: VoiceRenderer, participant_id: str | None) -> None:
    stop = asyncio.Event()
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
