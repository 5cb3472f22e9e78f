"""Subscriber process that accounts for every message: received or reported lost.

argv: BUS TOPIC TOTAL. Prints "ready" once its subscription is live, then one JSON
line ({"received", "gaps"}) once received + gaps == TOTAL: every message the sender
sent either arrived or was reported as a gap (a lost tail is reported by the sender's
heartbeat).
"""

import asyncio
import json
import sys

from xrmq.actors.runtime import Agent, AgentRuntime, subscribe
from xrmq.topics import context_topic

bus, topic_name, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
TOPIC = context_topic(topic_name)


class Counter(Agent):
    def __init__(self) -> None:
        self.received = 0
        self.lost = 0
        self.changed = asyncio.Event()

    @subscribe(TOPIC)
    async def on_update(self, message, ctx) -> None:
        self.received += 1
        self.changed.set()

    async def on_gap(self, gap, ctx) -> None:
        self.lost += gap.count
        self.changed.set()


async def main() -> None:
    counter = Counter()
    runtime = AgentRuntime(bus, name="accounting-subscriber")
    runtime.register("counter", counter)
    async with runtime:
        print("ready", flush=True)
        while counter.received + counter.lost < total:
            counter.changed.clear()
            await counter.changed.wait()
        print(json.dumps({"received": counter.received, "gaps": counter.lost}), flush=True)


asyncio.run(main())
