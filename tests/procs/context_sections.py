"""A process hosting the context section actors of a split deployment.

argv: BUS PLAN_JSON (the keyword arguments of ``context_plan``). Prints "ready" once
its subscriptions are live through the broker; runs until terminated.
"""

import asyncio
import json
import sys

from xrmq.actors.context import context_plan, register_sections
from xrmq.actors.runtime import AgentRuntime

bus, plan = sys.argv[1], context_plan(**json.loads(sys.argv[2]))


async def main() -> None:
    runtime = AgentRuntime(bus, name="context-sections")
    register_sections(runtime, plan)
    async with runtime:
        print("ready", flush=True)
        await asyncio.Event().wait()


asyncio.run(main())
