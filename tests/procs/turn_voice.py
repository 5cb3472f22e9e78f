"""Voice process of the turn e2e: a VoiceRenderer with a recording sink that also reports
every played segment and ended response as a JSON line.

argv: BUS. Prints "ready"; runs until terminated.
"""

import asyncio
import json
import sys

from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.voice import RecordingSink, ResponseEnded, Segment, VoiceRenderer
from xrmq.topics import INTERRUPTED_TOPIC, QUERY_TOPIC, VOICE_OUTPUT_TOPIC


class ReportingSink(RecordingSink):
    async def _record(self, event: Segment | ResponseEnded) -> None:
        await super()._record(event)
        if isinstance(event, Segment):
            report = {
                "event": "segment",
                "participant": event.participant_id,
                "response": event.response,
                "sources": list(event.sources),
                "request": event.request_id,
                "text": event.text,
            }
        else:
            report = {
                "event": "ended",
                "participant": event.participant_id,
                "response": event.response,
                "reason": event.reason,
            }
        print(json.dumps(report), flush=True)


async def main() -> None:
    runtime = AgentRuntime(sys.argv[1], name="turn-voice")
    runtime.register(
        "voice",
        VoiceRenderer(
            ReportingSink(words_per_minute=None),
            output_topic=VOICE_OUTPUT_TOPIC,
            query_topic=QUERY_TOPIC,
            interrupted_topic=INTERRUPTED_TOPIC,
        ),
    )
    async with runtime:
        print("ready", flush=True)
        await asyncio.Event().wait()


asyncio.run(main())
