"""Worker processes of the load suite: paced publishers and one loss-accounting subscriber.

``publisher BUS TOPIC NAME KEYS INTERVAL``: an ``AgentRuntime`` named NAME heartbeating every
INTERVAL seconds; prints ``ready``, then for each ``go RATE SECONDS`` command publishes RATE
messages a second for SECONDS over KEYS participants, waits until a heartbeat went out
after its last message, and prints ``{"sent": N}``.

``closing BUS TOPIC NAME KEYS``: a publisher without heartbeats that sends as fast as it
can on ``go _ SECONDS``, then stops and prints ``{"sent": N}`` (its final heartbeat alone
announces its tail).

``subscriber BUS TOPIC HWM``: an ``AgentRuntime`` (receive HWM ``HWM``: a small one makes
an overload overflow into losses) that counts the messages it receives and the losses it
is told of (gaps, a lost tail included); prints ``ready``, then for each ``report TOTAL
QUIET`` command, once received + lost reaches TOTAL or nothing arrived for QUIET seconds,
``{"received", "lost"}`` since the previous report.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from xrmq.actors.runtime import Agent, AgentRuntime, run
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

TEXT = "load " * 20


async def lines() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def publisher(bus: str, topic_name: str, name: str, keys: int, interval: float) -> None:
    topic = context_topic(topic_name)
    message = ConversationContextUpdate(TEXT)
    participants = [f"{name}-k{index}" for index in range(keys)]
    async with AgentRuntime(bus, name=name, metrics_interval=interval) as runtime:
        print("ready", flush=True)
        reader = await lines()
        while line := (await reader.readline()).decode().split():
            rate, seconds = float(line[1]), float(line[2])
            sent, started = 0, time.monotonic()
            while (elapsed := time.monotonic() - started) < seconds:
                due = int(elapsed * rate) if rate > 0 else sent + 500
                while sent < due:
                    runtime.send(topic, message, participant_id=participants[sent % keys])
                    sent += 1
                await asyncio.sleep(0.005 if rate > 0 else 0)
            await asyncio.sleep(interval * 1.5)  # a heartbeat went out after the last message
            print(json.dumps({"sent": sent}), flush=True)


async def closing(bus: str, topic_name: str, name: str, keys: int) -> None:
    """A publisher without heartbeats (``heartbeat_s=None``, as a one-shot client): on
    ``go SECONDS`` it publishes as fast as it can for SECONDS, stops (its final heartbeat
    alone announces its tail), prints ``{"sent": N}`` and exits."""
    topic = context_topic(topic_name)
    message = ConversationContextUpdate(TEXT)
    participants = [f"{name}-k{index}" for index in range(keys)]
    runtime = AgentRuntime(bus, name=name, heartbeat_s=None)
    await runtime.start()
    print("ready", flush=True)
    reader = await lines()
    seconds = float((await reader.readline()).decode().split()[1])
    sent, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        for _ in range(500):
            runtime.send(topic, message, participant_id=participants[sent % keys])
            sent += 1
        await asyncio.sleep(0)
    await runtime.stop()
    print(json.dumps({"sent": sent}), flush=True)


class Accounting(Agent):
    def __init__(self, topic_name: str) -> None:
        self.topic = context_topic(topic_name)
        self.received = 0
        self.lost = 0
        self.changed = asyncio.Event()

    def handlers(self):
        return {self.topic: self.on_message}

    async def on_message(self, message: ConversationContextUpdate, ctx) -> None:
        self.received += 1
        self.changed.set()

    async def on_gap(self, gap, ctx) -> None:
        self.lost += gap.count
        self.changed.set()


async def subscriber(bus: str, topic_name: str, hwm: int) -> None:
    accounting = Accounting(topic_name)
    runtime = AgentRuntime(bus, name="load-subscriber", hwm=hwm)
    runtime.register("accounting", accounting)
    async with runtime:
        print("ready", flush=True)
        reader = await lines()
        reported = (0, 0)
        while line := (await reader.readline()).decode().split():
            total, quiet = int(line[1]), float(line[2])
            while accounting.received + accounting.lost - sum(reported) < total:
                accounting.changed.clear()
                try:
                    await asyncio.wait_for(accounting.changed.wait(), quiet)
                except TimeoutError:
                    break
            now = (accounting.received, accounting.lost)
            print(
                json.dumps({"received": now[0] - reported[0], "lost": now[1] - reported[1]}),
                flush=True,
            )
            reported = now


def main() -> None:
    role, bus, topic_name, *rest = sys.argv[1:]
    if role == "publisher":
        run(publisher(bus, topic_name, rest[0], int(rest[1]), float(rest[2])))
    elif role == "closing":
        run(closing(bus, topic_name, rest[0], int(rest[1])))
    else:
        run(subscriber(bus, topic_name, int(rest[0])))


if __name__ == "__main__":
    main()
