"""Conversation process of the turn e2e: a Conversation over a split ContextManager
(its replica; sections live in the context process), served on the bus as "conversation".

argv: BUS TOPIC. Prints "ready", then whenever a participant's rendered context changes,
"context <participant> <n>" (n: how many blocks mention the topic) and
"dialogue <participant> <JSON list of the recorded requests>", so the test knows what
reached the context without sleeping. Runs until terminated.
"""

import asyncio
import json
import re
import sys

from xrmq.actors.context import ContextManager
from xrmq.actors.conversation import Conversation
from xrmq.actors.models import OfflineLLM
from xrmq.actors.routing import serve
from xrmq.actors.runtime import AgentRuntime
from xrmq.topics import VOICE_OUTPUT_TOPIC

bus, topic = sys.argv[1], sys.argv[2]


async def main() -> None:
    llm = OfflineLLM(time_to_first_token_s=0.05, tokens_per_second=8)
    context = ContextManager(llm, incremental_context_topics=(topic,), deployment="split")
    runtime = AgentRuntime(bus, name="turn-conversation")
    runtime.register("context", context.subscriber())
    conversation = Conversation(
        llm,
        context=context,
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
        instructions="You help operators in the reactor lab.",
    )
    runtime.register("conversation-server", serve("conversation", conversation))
    async with runtime:
        print("ready", flush=True)
        seen: dict[tuple[str, str], str] = {}
        while True:
            await context.changed()
            for participant in ("p1", "p2"):
                blocks = context.blocks(participant)
                reports = {
                    "context": str(sum(f"[{topic}]" in block.text for block in blocks)),
                    "dialogue": json.dumps(
                        [
                            m.group(1)
                            for b in blocks
                            for m in [re.search(r"User: (.*)", b.text)]
                            if m
                        ]
                    ),
                }
                for kind, report in reports.items():
                    if seen.get((kind, participant)) != report:
                        seen[(kind, participant)] = report
                        print(f"{kind} {participant} {report}", flush=True)


asyncio.run(main())
