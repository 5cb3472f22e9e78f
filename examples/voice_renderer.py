"""A voice renderer with a sink of your own: subtitles, one line per response.

Run it next to `xrmq up` (same bus): python examples/voice_renderer.py [BUS]
It subscribes to the voice output topic (and to queries and interruptions, so a new
query or a barge-in drops stale replies), and prints each response once it has ended.
A real headset would start audio in play() and return when it has finished playing.
Stops on Ctrl-C or SIGTERM.
"""

import asyncio
import os
import signal
import sys

from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.voice import ResponseEnded, Segment, VoiceRenderer
from xrmq.topics import INTERRUPTED_TOPIC, QUERY_TOPIC


class SubtitleSink:
    """Collects each response's segments and prints it as one subtitle when it ends."""

    def __init__(self) -> None:
        self.lines: dict[tuple[str, int], list[str]] = {}

    async def play(self, segment: Segment) -> None:
        self.lines.setdefault((segment.participant_id, segment.response), []).append(segment.text)

    async def end(self, ended: ResponseEnded) -> None:
        words = " ".join(self.lines.pop((ended.participant_id, ended.response), []))
        cut = "" if ended.reason == "completed" else f" [{ended.reason}]"
        print(
            f"subtitle for {ended.participant_id} ({', '.join(ended.sources)}): {words}{cut}",
            flush=True,
        )


async def main(bus: str) -> None:
    runtime = AgentRuntime(bus, name="subtitles")
    runtime.register(
        "subtitles",
        VoiceRenderer(SubtitleSink(), query_topic=QUERY_TOPIC, interrupted_topic=INTERRUPTED_TOPIC),
    )
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    async with runtime:
        print("voice renderer: ready", flush=True)
        await stop.wait()


asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("XRMQ_BUS", "default")))
