"""A sensor process: publishes what it observes as participant context for the edge box.

Run it next to `xrmq up` (same bus): python examples/sensor_publisher.py [BUS]
On a secure bus add `--key sensor.key_secret --server-key broker.key` (or set
XRMQ_KEY and XRMQ_SERVER_KEY); its runtime is then named after its key's identity.
Then `xrmq say --participant p1 "What temperature is the kettle set to?"` is answered
from the note (`--participant NAME` publishes for another participant, e.g. `alice` of
`examples/secure-edge-box.toml`, whose key may only ask as alice). `scene` is a summary
topic (an update replaces the participant's state), `notes` an incremental one (updates
append and are compacted over time). No asyncio: `Publisher` runs the bus client in a
background thread.
"""

import argparse
import os

from xrmq.actors import Publisher

parser = argparse.ArgumentParser(description="publish a scene and a note for a participant")
parser.add_argument("bus", nargs="?", default=os.environ.get("XRMQ_BUS", "default"))
parser.add_argument("--participant", default="p1", help="whose context (default: %(default)s)")
parser.add_argument("--key", help="this sensor's NAME.key_secret (a CURVE bus; or $XRMQ_KEY)")
parser.add_argument("--server-key", help="the broker's public key file (or $XRMQ_SERVER_KEY)")
args = parser.parse_args()
for value, variable in ((args.key, "XRMQ_KEY"), (args.server_key, "XRMQ_SERVER_KEY")):
    if value:
        os.environ[variable] = value  # the runtime takes its CURVE credentials from there
keyed = bool(os.environ.get("XRMQ_KEY"))  # then its name must start with its identity's
with Publisher(args.bus, name=None if keyed else "lab-sensor") as pub:
    who = args.participant
    pub.publish("scene", f"{who} is at the workbench in lab 3.", participant=who, source="camera")
    pub.publish(
        "notes", "The kettle in lab 3 is set to 85 degrees.", participant=who, source="kettle"
    )
print(f"sensor: published scene and notes for {who}", flush=True)
