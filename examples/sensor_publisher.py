"""A sensor process: publishes what it observes as participant context for the edge box.

Run it next to `xrmq up` (same bus): python examples/sensor_publisher.py [BUS]
Then `xrmq say --participant p1 "What temperature is the kettle set to?"` is answered
from the note. `scene` is a summary topic (an update replaces the participant's state),
`notes` an incremental one (updates append and are compacted over time).
"""

import asyncio
import os
import sys

from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

SCENE, NOTES = context_topic("scene"), context_topic("notes")


async def main(bus: str) -> None:
    async with AgentRuntime(bus, name="lab-sensor") as runtime:
        await runtime.publish(SCENE, ConversationContextUpdate("p1 is at the workbench in lab 3."),
                              participant_id="p1", source="camera")
        await runtime.publish(NOTES, ConversationContextUpdate("The kettle in lab 3 is set to 85 degrees."),
                              participant_id="p1", source="kettle")
    print("sensor: published scene and notes for p1", flush=True)


asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("XRMQ_BUS", "default")))
