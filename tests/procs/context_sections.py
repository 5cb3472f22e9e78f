"""A process hosting the context section actors of a split deployment.

argv: BUS PLAN_JSON [JOURNAL] (the keyword arguments of ``context_plan``, plus an optional
``max_message_bytes`` for its runtime, and the path of the journal to keep and restore).
Prints "ready" once its journal is restored and its subscriptions are live through the
broker; runs until terminated.
"""

import asyncio
import json
import sys

from xrmq.actors.context import context_plan, register_sections
from xrmq.actors.context.store import open_store
from xrmq.actors.runtime import AgentRuntime

bus, arguments = sys.argv[1], json.loads(sys.argv[2])
limits = (
    {"max_message_bytes": arguments.pop("max_message_bytes")}
    if "max_message_bytes" in arguments
    else {}
)
plan = context_plan(**arguments)
journal = sys.argv[3] if len(sys.argv) > 3 else None


async def main() -> None:
    runtime = AgentRuntime(bus, name="context-sections", **limits)
    register_sections(runtime, plan, store=open_store(journal) if journal else None)
    async with runtime:
        print("ready", flush=True)
        await asyncio.Event().wait()


asyncio.run(main())
