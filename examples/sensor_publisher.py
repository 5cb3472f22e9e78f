"""A sensor process: publishes what it observes as participant context for the edge box.

Run it next to `xrmq up` (same bus): python examples/sensor_publisher.py [BUS]
Then `xrmq say --participant p1 "What temperature is the kettle set to?"` is answered
from the note. `scene` is a summary topic (an update replaces the participant's state),
`notes` an incremental one (updates append and are compacted over time). No asyncio:
`Publisher` runs the bus client in a background thread.
"""

import os
import sys

from xrmq.actors import Publisher

bus = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("XRMQ_BUS", "default")
with Publisher(bus, name="lab-sensor") as pub:
    pub.publish("scene", "p1 is at the workbench in lab 3.", participant="p1", source="camera")
    pub.publish(
        "notes", "The kettle in lab 3 is set to 85 degrees.", participant="p1", source="kettle"
    )
print("sensor: published scene and notes for p1", flush=True)
