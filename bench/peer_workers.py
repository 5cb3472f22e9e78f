"""In-process actor runtimes measured like xrmq: autogen-core, Pykka and embedded xrmq.

``python -m bench.peer_workers NAME COUNT ASKS REPS`` (NAME: ``autogen-core``,
``pykka``, ``xrmq-embedded``) runs, in a fresh process, one warm-up and then REPS
repetitions of: COUNT one-way messages from the main program to one actor (timed from
the first send to the actor handling the last), and ASKS sequential request/reply
round trips to another actor. Prints one JSON line: ``{"version", "throughput": [...],
"rtt_us": [[...], ...]}``, or ``{"skipped": reason}`` when the peer is not installed.

The messages carry the same fields as the bus suite's (dataclasses for autogen-core,
whose handlers route on the type hint; the msgspec structs elsewhere). No
``from __future__ import annotations`` here: autogen-core resolves the handlers' hints
at decoration time, and they name classes local to ``run_autogen``.
"""

import asyncio
import importlib.metadata
import json
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from .bus_workers import ANSWER, FRAGMENT, QUERY


def timed_rtts(ask, asks: int) -> list[float]:
    rtts = []
    for _ in range(asks):
        began = time.perf_counter_ns()
        ask()
        rtts.append((time.perf_counter_ns() - began) / 1000)
    return rtts


# ---------------------------------------------------------------- autogen-core


def run_autogen(count: int, asks: int, reps: int) -> dict:
    from autogen_core import (
        AgentId,
        MessageContext,
        RoutedAgent,
        SingleThreadedAgentRuntime,
        TopicId,
        TypeSubscription,
        message_handler,
    )

    @dataclass
    class Fragment:
        kind: str
        text: str
        request_id: str
        response_id: str
        final: bool

    @dataclass
    class Query:
        text: str
        timestamp_us: int

    @dataclass
    class Answer:
        kind: str
        text: str
        request_id: str

    # autogen-core's serializer refuses a union field, so the ids are typed str: both are set
    assert FRAGMENT.request_id and FRAGMENT.response_id and ANSWER.request_id
    fragment = Fragment(
        FRAGMENT.kind, FRAGMENT.text, FRAGMENT.request_id, FRAGMENT.response_id, FRAGMENT.final
    )
    query = Query(QUERY.text, QUERY.timestamp_us)
    answer = Answer(ANSWER.kind, ANSWER.text, ANSWER.request_id)
    state: dict[str, Any] = {"count": 0, "target": 0, "done": None}

    class Counter(RoutedAgent):
        @message_handler
        async def on_fragment(self, message: Fragment, ctx: MessageContext) -> None:
            state["count"] += 1
            if state["count"] == state["target"]:
                state["done"].set()

    class Pong(RoutedAgent):
        @message_handler
        async def on_query(self, message: Query, ctx: MessageContext) -> Answer:
            return answer

    async def main() -> dict:
        runtime = SingleThreadedAgentRuntime()
        await Counter.register(runtime, "counter", lambda: Counter("counter"))
        await Pong.register(runtime, "pong", lambda: Pong("pong"))
        await runtime.add_subscription(TypeSubscription(topic_type="bench", agent_type="counter"))
        runtime.start()
        topic, pong = TopicId("bench", source="p1"), AgentId("pong", "default")
        throughput, rtts = [], []
        for rep in range(reps + 1):
            state.update(count=0, target=count, done=asyncio.Event())
            began = time.perf_counter()
            for _ in range(count):
                await runtime.publish_message(fragment, topic)
            await state["done"].wait()
            elapsed = time.perf_counter() - began
            rep_rtts = []
            for _ in range(asks):
                t0 = time.perf_counter_ns()
                await runtime.send_message(query, pong)
                rep_rtts.append((time.perf_counter_ns() - t0) / 1000)
            if rep:
                throughput.append(count / elapsed)
                rtts.append(rep_rtts)
        await runtime.stop()
        return {"throughput": throughput, "rtt_us": rtts}

    return {"version": importlib.metadata.version("autogen-core"), **asyncio.run(main())}


# ---------------------------------------------------------------- Pykka


def run_pykka(count: int, asks: int, reps: int) -> dict:
    import pykka

    class Counter(pykka.ThreadingActor):
        def __init__(self) -> None:
            super().__init__()
            self.count, self.target, self.done = 0, 0, threading.Event()

        def on_receive(self, message):
            if isinstance(message, tuple):  # ("expect", n, event)
                self.count, self.target, self.done = 0, message[1], message[2]
                return None
            self.count += 1
            if self.count == self.target:
                self.done.set()
            return None

    class Pong(pykka.ThreadingActor):
        def on_receive(self, message):
            return ANSWER

    counter, pong = Counter.start(), Pong.start()
    throughput, rtts = [], []
    try:
        for rep in range(reps + 1):
            done = threading.Event()
            counter.ask(("expect", count, done))
            began = time.perf_counter()
            for _ in range(count):
                counter.tell(FRAGMENT)
            done.wait()
            elapsed = time.perf_counter() - began
            rep_rtts = timed_rtts(lambda: pong.ask(QUERY), asks)
            if rep:
                throughput.append(count / elapsed)
                rtts.append(rep_rtts)
    finally:
        pykka.ActorRegistry.stop_all()
    return {
        "version": importlib.metadata.version("pykka"),
        "throughput": throughput,
        "rtt_us": rtts,
    }


# ---------------------------------------------------------------- xrmq, embedded broker


def run_xrmq_embedded(count: int, asks: int, reps: int) -> dict:
    from xrmq.actors.runtime import Agent, AgentRuntime, run, subscribe
    from xrmq.schemas import ResponseOutput, UserQuery
    from xrmq.topics import Topic

    fragments, pings = Topic("bench.fragment.e", ResponseOutput), Topic("bench.ping.e", UserQuery)

    class Counter(Agent):
        count, target = 0, 0
        done: Any = None  # an asyncio.Event, set before each batch

        @subscribe(fragments)
        async def on_fragment(self, message, ctx) -> None:
            self.count += 1
            if self.count == self.target:
                self.done.set()

    class Pong(Agent):
        @subscribe(pings)
        async def on_ping(self, message, ctx) -> ResponseOutput:
            return ANSWER

    async def main() -> dict:
        counter = Counter()
        runtime = AgentRuntime(name="bench-embedded")
        runtime.register("counter", counter)
        runtime.register("pong", Pong())
        throughput, rtts = [], []
        async with runtime:
            for rep in range(reps + 1):
                counter.count, counter.target, counter.done = 0, count, asyncio.Event()
                began = time.perf_counter()
                for _ in range(count):
                    await runtime.publish(fragments, FRAGMENT, participant_id="p1")
                await counter.done.wait()
                elapsed = time.perf_counter() - began
                rep_rtts = []
                for _ in range(asks):
                    t0 = time.perf_counter_ns()
                    await runtime.ask(pings, QUERY, reply_type=ResponseOutput, participant_id="p1")
                    rep_rtts.append((time.perf_counter_ns() - t0) / 1000)
                if rep:
                    throughput.append(count / elapsed)
                    rtts.append(rep_rtts)
        return {
            "version": importlib.metadata.version("xrmq"),
            "throughput": throughput,
            "rtt_us": rtts,
        }

    return run(main())  # the loop xrmq's own processes run on


PEERS = {"autogen-core": run_autogen, "pykka": run_pykka, "xrmq-embedded": run_xrmq_embedded}
PACKAGES = {"autogen-core": "autogen_core", "pykka": "pykka", "xrmq-embedded": "xrmq"}

if __name__ == "__main__":
    name, count, asks, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    try:
        __import__(PACKAGES[name])
    except ImportError as error:
        print(
            json.dumps({"skipped": f"{name} is not installed ({error}); pip install {name}"}),
            flush=True,
        )
    else:
        print(json.dumps(PEERS[name](count, asks, reps)), flush=True)
