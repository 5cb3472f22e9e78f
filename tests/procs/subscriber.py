"""Subscriber process: count messages on a context topic, report order and gaps as JSON.

argv: BUS TOPIC COUNT [PARTICIPANT]. Prints "ready" once its subscription is live
through the broker, then one JSON line when COUNT messages arrived.
"""

import asyncio
import json
import sys

from xrmq.actors.runtime import Agent, AgentRuntime, subscribe
from xrmq.topics import context_topic

bus, topic_name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
participant = sys.argv[4] if len(sys.argv) > 4 else None
TOPIC = context_topic(topic_name)


class Counter(Agent):
    def __init__(self) -> None:
        self.texts: list[str] = []
        self.participants: set[str | None] = set()
        self.done = asyncio.Event()

    @subscribe(TOPIC)
    async def on_update(self, message, ctx) -> None:
        self.texts.append(message.text)
        self.participants.add(ctx.participant_id)
        if len(self.texts) == count:
            self.done.set()


async def main() -> None:
    counter = Counter()
    runtime = AgentRuntime(bus, name="subscriber")
    runtime.register("counter", counter, participant_id=participant)
    async with runtime:
        print("ready", flush=True)
        await counter.done.wait()
        stats = runtime.metrics()
        print(
            json.dumps(
                {
                    "count": len(counter.texts),
                    "texts": counter.texts,
                    "participants": sorted(p or "" for p in counter.participants),
                    "gaps": stats.gaps,
                    "rejected": stats.rejected,
                }
            ),
            flush=True,
        )


asyncio.run(main())
