"""A sensor process: publishes incremental updates straight to a context topic.

argv: BUS TOPIC COUNT PARTICIPANT... Update ``m`` of participant ``p`` is
``"<p>-u<m> " + filler``; participants take turns. Prints "published" when done.
"""

import asyncio
import sys

from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

bus, topic, count, participants = (
    sys.argv[1],
    context_topic(sys.argv[2]),
    int(sys.argv[3]),
    sys.argv[4:],
)


async def main() -> None:
    async with AgentRuntime(bus, name="sensor") as runtime:
        for m in range(count):
            for participant in participants:
                text = f"{participant}-u{m} reading " + "x" * 80
                await runtime.publish(
                    topic, ConversationContextUpdate(text), participant_id=participant
                )
        print("published", flush=True)


asyncio.run(main())
