"""Text input process of the turn e2e: one command per stdin line.

``query <participant> <text>`` publishes a UserQuery; ``interrupt <participant>``
publishes Interrupted. Prints "ready", then "sent <message id>" after each command.
argv: BUS.
"""

import asyncio
import sys
import time

from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import Interrupted, UserQuery
from xrmq.topics import INTERRUPTED_TOPIC, QUERY_TOPIC


async def main() -> None:
    async with AgentRuntime(sys.argv[1], name="turn-input") as runtime:
        print("ready", flush=True)
        while line := await asyncio.to_thread(sys.stdin.readline):
            command, participant, *text = line.strip().split(" ", 2)
            if command == "query":
                sent = runtime.send(
                    QUERY_TOPIC,
                    UserQuery(text[0], time.time_ns() // 1000),
                    participant_id=participant,
                )
            else:
                sent = runtime.send(INTERRUPTED_TOPIC, Interrupted(), participant_id=participant)
            print(f"sent {sent}", flush=True)


asyncio.run(main())
