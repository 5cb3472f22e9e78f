"""Context process of the turn e2e: the context section actors and one compaction worker.

argv: BUS TOPIC. Prints "ready"; runs until terminated.
"""

import asyncio
import sys

from xrmq.actors.context.plan import context_plan
from xrmq.actors.context.sections import register_sections
from xrmq.actors.context.workers import register_workers
from xrmq.actors.models import OfflineLLM
from xrmq.actors.runtime import AgentRuntime

bus, topic = sys.argv[1], sys.argv[2]


async def main() -> None:
    plan = context_plan(incremental_context_topics=(topic,), compaction_workers=1)
    runtime = AgentRuntime(bus, name="turn-context")
    register_sections(runtime, plan)
    register_workers(runtime, plan, OfflineLLM(time_to_first_token_s=0, tokens_per_second=0))
    async with runtime:
        print("ready", flush=True)
        await asyncio.Event().wait()


asyncio.run(main())
