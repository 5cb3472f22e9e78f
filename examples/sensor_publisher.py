"""A sensor process: publishes what it observes as participant context for the edge box.

Run it next to `xrmq up` (same bus): python examples/sensor_publisher.py [BUS]
On a secure bus add `--key sensor.key_secret --server-key broker.key` (or set
XRMQ_KEY and XRMQ_SERVER_KEY); its runtime is then named after its key's identity.
Then `xrmq say --participant p1 "What temperature is the kettle set to?"` is answered
from the note. `scene` is a summary topic (an update replaces the participant's state),
`notes` an incremental one (updates append and are compacted over time).
"""

import argparse
import asyncio
import os

from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

SCENE, NOTES = context_topic("scene"), context_topic("notes")


async def main(bus: str, key: str | None, server_key: str | None) -> None:
    name = None if key or os.environ.get("XRMQ_KEY") else "lab-sensor"
    async with AgentRuntime(bus, name=name, key=key, server_key=server_key) as runtime:
        await runtime.publish(SCENE, ConversationContextUpdate("p1 is at the workbench in lab 3."),
                              participant_id="p1", source="camera")
        await runtime.publish(NOTES, ConversationContextUpdate("The kettle in lab 3 is set to 85 degrees."),
                              participant_id="p1", source="kettle")
    print("sensor: published scene and notes for p1", flush=True)


parser = argparse.ArgumentParser(description="publish a scene and a note for participant p1")
parser.add_argument("bus", nargs="?", default=os.environ.get("XRMQ_BUS", "default"))
parser.add_argument("--key", help="this sensor's NAME.key_secret (a CURVE bus)")
parser.add_argument("--server-key", help="the broker's public key file (a CURVE bus)")
args = parser.parse_args()
asyncio.run(main(args.bus, args.key, args.server_key))
