"""A process hosting one shard of a keyed kind; each instance answers asks with its shard.

argv: BUS SHARD SHARDS. Prints "ready", then on stdin EOF prints the JSON list of the
keys it spawned and exits.
"""

import asyncio
import json
import sys

from xrmq.actors.runtime import Agent, AgentRuntime, subscribe
from xrmq.topics import context_topic

bus, shard, shards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
TOPIC = context_topic("keyed.probe")


class Section(Agent):
    def __init__(self, key: str) -> None:
        self.key = key

    @subscribe(TOPIC)
    async def on_probe(self, message, ctx) -> int:
        return shard


async def main() -> None:
    runtime = AgentRuntime(bus, name=f"shard-{shard}")
    runtime.register_keyed("section", Section, shard=shard, shards=shards)
    async with runtime:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.read)
        print(json.dumps(sorted(runtime.keyed_instances("section"))), flush=True)


asyncio.run(main())
