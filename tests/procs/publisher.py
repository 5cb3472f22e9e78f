"""Publisher process: publish COUNT context updates "m0".."m{COUNT-1}".

argv: BUS TOPIC COUNT [PARTICIPANT...]. Participants are used round-robin.
Prints "published" when done.
"""

import asyncio
import sys

from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

bus, topic_name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
participants: list[str | None] = [*sys.argv[4:]] or [None]
TOPIC = context_topic(topic_name)


async def main() -> None:
    async with AgentRuntime(bus, name="publisher") as runtime:
        for i in range(count):
            await runtime.publish(
                TOPIC,
                ConversationContextUpdate(f"m{i}"),
                participant_id=participants[i % len(participants)],
            )
        print("published", flush=True)


asyncio.run(main())
