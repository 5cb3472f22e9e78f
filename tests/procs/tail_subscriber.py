"""Subscriber process that accounts for one sender's notes: received or reported lost.

argv: BUS TOPIC TOTAL SENDER. Prints "ready" once its subscriptions are live; prints
"synced" (once) when a note on TOPIC.sync arrives (everything queued for it before that
note has been read); prints one JSON line ({"received", "gaps"}) once SENDER's notes on
TOPIC received + reported lost == TOTAL.
"""

import asyncio
import json
import sys

from xrmq.actors.runtime import Agent, AgentRuntime, subscribe
from xrmq.topics import context_topic

bus, topic_name, total, sender = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
TOPIC = context_topic(topic_name)
SYNC = context_topic(f"{topic_name}.sync")


class Counter(Agent):
    def __init__(self) -> None:
        self.received = 0
        self.lost = 0
        self.synced = False
        self.changed = asyncio.Event()

    @subscribe(TOPIC)
    async def on_note(self, message, ctx) -> None:
        if ctx.metadata.sender == sender:
            self.received += 1
            self.changed.set()

    @subscribe(SYNC)
    async def on_sync(self, message, ctx) -> None:
        if not self.synced:
            self.synced = True
            print("synced", flush=True)

    async def on_gap(self, gap, ctx) -> None:
        if gap.sender == sender and gap.topic == TOPIC.name:
            self.lost += gap.count
            self.changed.set()


async def main() -> None:
    counter = Counter()
    runtime = AgentRuntime(bus, name="tail-subscriber")
    runtime.register("counter", counter)
    async with runtime:
        print("ready", flush=True)
        while counter.received + counter.lost < total:
            counter.changed.clear()
            await counter.changed.wait()
        print(json.dumps({"received": counter.received, "gaps": counter.lost}), flush=True)


asyncio.run(main())
