"""Publisher process with the runtime's defaults (no ``metrics_interval``): publishes on cue.

argv: BUS TOPIC COUNT [HEARTBEAT]; HEARTBEAT "none" turns the short periodic heartbeat
off (``heartbeat_s=None``: only the final one). Prints "ready" once connected; on the stdin
line "send" publishes COUNT notes for participant p1 and prints "sent"; on "mark" publishes
one note on TOPIC.mark (a reader that gets it has been sent everything before it: the broker
forwards one publisher's messages in order); on "close" stops its runtime (its final
heartbeat) and prints "closed".
"""

import asyncio
import sys

from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

bus, topic_name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
periodic = sys.argv[4:] != ["none"]
TOPIC = context_topic(topic_name)
MARK = context_topic(f"{topic_name}.mark")


async def main() -> None:
    if periodic:
        runtime = AgentRuntime(bus, name="tail-publisher")
    else:
        runtime = AgentRuntime(bus, name="tail-publisher", heartbeat_s=None)
    await runtime.start()
    print("ready", flush=True)
    while (command := (await asyncio.to_thread(sys.stdin.readline)).strip()) != "close":
        if command == "send":
            for index in range(count):
                runtime.send(TOPIC, ConversationContextUpdate(f"n{index}"), participant_id="p1")
            print("sent", flush=True)
        elif command == "mark":
            runtime.send(MARK, ConversationContextUpdate("mark"))
    await runtime.stop()
    print("closed", flush=True)


asyncio.run(main())
