"""A process hosting the context section actors of a split deployment.

argv: BUS PLAN_JSON [JOURNAL] (the keyword arguments of ``context_plan``, and the path of
the journal to keep and restore). Prints "ready" once its journal is restored and its
subscriptions are live through the broker; runs until terminated.
"""

import asyncio
import json
import sys

from xrmq.actors.context import context_plan, register_sections
from xrmq.actors.context.store import open_store
from xrmq.actors.runtime import AgentRuntime

bus, plan = sys.argv[1], context_plan(**json.loads(sys.argv[2]))
journal = sys.argv[3] if len(sys.argv) > 3 else None


async def main() -> None:
    runtime = AgentRuntime(bus, name="context-sections")
    register_sections(runtime, plan, store=open_store(journal) if journal else None)
    async with runtime:
        print("ready", flush=True)
        await asyncio.Event().wait()


asyncio.run(main())
