"""Publisher process: COUNT observations with a list field, for the private-copies test.

argv: BUS COUNT PARTICIPANT. Observation ``i`` carries ``labels=["kettle", "m<i>"]``
(a mutable list inside a frozen Struct). Prints "published" when done.
"""

import sys

import msgspec

from xrmq.actors.runtime import AgentRuntime, run
from xrmq.topics import Topic

bus, count, participant = sys.argv[1], int(sys.argv[2]), sys.argv[3]


class Observation(msgspec.Struct, frozen=True):
    labels: list[str]


OBSERVATIONS = Topic("test.observations", Observation)


async def main() -> None:
    async with AgentRuntime(bus, name="observation-publisher") as runtime:
        for i in range(count):
            await runtime.publish(
                OBSERVATIONS, Observation(["kettle", f"m{i}"]), participant_id=participant
            )
        print("published", flush=True)


run(main())
