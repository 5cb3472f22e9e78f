"""Sensor process of the turn e2e: publish one ConversationContextUpdate and exit.

argv: BUS TOPIC PARTICIPANT TEXT. Prints "published".
"""

import asyncio
import sys

from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

bus, topic, participant, text = sys.argv[1:5]


async def main() -> None:
    async with AgentRuntime(bus, name="turn-sensor") as runtime:
        await runtime.publish(
            context_topic(topic),
            ConversationContextUpdate(text),
            participant_id=participant,
            source="monitor",
        )
        print("published", flush=True)


asyncio.run(main())
