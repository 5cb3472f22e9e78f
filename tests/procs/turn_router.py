"""Router process of the turn e2e: an AgentRouter actor whose only destination is the
remote "conversation". argv: BUS. Prints "ready"; runs until terminated.
"""

import asyncio
import sys

from xrmq.actors.routing import AgentRouter, SingleDestination, remote
from xrmq.actors.runtime import AgentRuntime
from xrmq.topics import INTERRUPTED_TOPIC, QUERY_TOPIC, VOICE_OUTPUT_TOPIC


async def main() -> None:
    runtime = AgentRuntime(sys.argv[1], name="turn-router")
    conversation = runtime.register("conversation-proxy", remote("conversation"))
    runtime.register(
        "router",
        AgentRouter(
            {"conversation": conversation},
            SingleDestination(),
            default="conversation",
            query_topic=QUERY_TOPIC,
            output_topic=VOICE_OUTPUT_TOPIC,
            interrupted_topic=INTERRUPTED_TOPIC,
        ),
    )
    async with runtime:
        print("ready", flush=True)
        await asyncio.Event().wait()


asyncio.run(main())
