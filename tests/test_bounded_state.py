"""Issue 13, item 3: every table a bus peer can grow has a bound, and evictions are counted.

100k messages from 100k distinct fake senders, for 100k distinct participants, with
distinct ``reply_to`` inboxes, at one runtime that hosts a voice renderer, an asked
actor and a keyed kind: the sequence tracker, the outgoing reply streams, the keyed
instances and the renderer's participants stay within their bounds, the process's
memory stops growing once they are full (what Python keeps, traced exactly; the RSS,
loosely), and each table counts its evictions.
"""

from __future__ import annotations

import asyncio
import gc
import os
import tracemalloc
import uuid

import msgspec
import pytest
import zmq

from xrmq.actors.routing import AgentRouter
from xrmq.actors.runtime import Agent, AgentRuntime, subscribe
from xrmq.actors.runtime.address import parse_bus
from xrmq.actors.runtime.broker import Broker
from xrmq.actors.voice import VoiceRenderer
from xrmq.actors.voice.sinks import RecordingSink
from xrmq.schemas import AgentTurn, ConversationContextUpdate
from xrmq.topics import INTERRUPTED_TOPIC, VOICE_OUTPUT_TOPIC, context_topic

from router_doubles import Decisions, Destination, Log, router_output

pytestmark = pytest.mark.timeout(180)

ECHO = context_topic("bounded.echo")
KEYED = context_topic("bounded.keyed")
BOUNDS = {"stream_capacity": 2000, "outgoing_streams": 1000, "keyed_instances": 300}
RENDERER_PARTICIPANTS = 300
TOTAL = 100_000
_encode = msgspec.msgpack.encode


class Echo(Agent):
    @subscribe(ECHO)
    async def on_echo(self, message: ConversationContextUpdate, ctx) -> str:
        return message.text


class Keyed(Agent):
    def __init__(self, key: str) -> None:
        self.key = key

    @subscribe(KEYED)
    async def on_note(self, message: ConversationContextUpdate, ctx) -> None:
        pass


def rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Flood:
    """A raw pyzmq publisher on its own thread: fake senders, participants and inboxes.

    ``sync()`` asks the echo actor from the flood's own socket and waits for the answer:
    the runtime has then dispatched everything the flood sent before.
    """

    def __init__(self, bus: str) -> None:
        prefix = bus.removeprefix("ipc://")
        self.context = zmq.Context()
        self.pub = self.context.socket(zmq.PUB)
        self.pub.setsockopt(zmq.SNDHWM, 0)
        self.pub.connect(f"ipc://{prefix}.in")
        self.sub = self.context.socket(zmq.SUB)
        self.sub.connect(f"ipc://{prefix}.out")
        self.inbox = f"_inbox.flood-{uuid.uuid4().hex[:8]}"
        self.sub.setsockopt(zmq.SUBSCRIBE, self.inbox.encode() + b"\x00")
        self.syncs = 0

    def envelope(
        self, sender: str, seq: int, participant: str, message_id: str | None = None, **extra
    ) -> bytes:
        return _encode(
            {
                "message_id": message_id or uuid.uuid4().hex,
                "source": "flood",
                "sender": sender,
                "epoch": 1,
                "seq": seq,
                "timestamp_us": 1,
                "participant_id": participant,
                **extra,
            }
        )

    def sync(self, timeout_s: float = 60.0) -> None:
        key = ECHO.key("sync")
        # Answers to an earlier sync's tries can still arrive: only these count.
        tries: set[str] = set()
        for _ in range(int(timeout_s * 20)):
            self.syncs += 1
            message_id = uuid.uuid4().hex
            tries.add(message_id)
            self.pub.send_multipart(
                [
                    key,
                    self.envelope(self.inbox, self.syncs, "sync", message_id, reply_to=self.inbox),
                    _encode({"text": "sync"}),
                ]
            )
            while self.sub.poll(50):
                metadata = msgspec.msgpack.decode(self.sub.recv_multipart()[1])
                if metadata.get("correlation_id") in tries:
                    return
        raise TimeoutError("flood: the runtime did not answer the sync ask")

    def send(self, start: int, stop: int) -> None:
        pub = self.pub
        for index in range(start, stop):
            sender, participant = f"fake{index}", f"p{index}"
            kind = index % 4
            if kind == 0:  # a barge-in for a participant nobody knows
                frames = [
                    INTERRUPTED_TOPIC.key(participant),
                    self.envelope(sender, 1, participant),
                    _encode({}),
                ]
            elif kind == 1:  # the first fragment of a reply stream for a new participant
                frames = [
                    VOICE_OUTPUT_TOPIC.key(participant),
                    self.envelope(sender, 1, participant),
                    _encode(
                        {
                            "kind": "reply",
                            "text": "hello",
                            "request_id": "q",
                            "response_id": "r",
                            "final": False,
                        }
                    ),
                ]
            elif kind == 2:  # an ask with a reply_to of its own
                frames = [
                    ECHO.key(participant),
                    self.envelope(sender, 1, participant, reply_to=f"_inbox.{sender}"),
                    _encode({"text": "x"}),
                ]
            else:  # a write that spawns a keyed instance
                frames = [
                    KEYED.key(participant),
                    self.envelope(sender, 1, participant),
                    _encode({"text": "x"}),
                ]
            pub.send_multipart(frames)

    def close(self) -> None:
        self.pub.close(linger=0)
        self.sub.close(linger=0)
        self.context.term()


async def test_100k_distinct_senders_participants_and_inboxes_stay_within_every_bound(tmp_path):
    bus = f"ipc://{tmp_path}/bus"
    broker = Broker(parse_bus(bus)).start()
    renderer = VoiceRenderer(
        RecordingSink(words_per_minute=None),
        interrupted_topic=INTERRUPTED_TOPIC,
        max_participants=RENDERER_PARTICIPANTS,
    )
    runtime = AgentRuntime(bus, **BOUNDS)
    runtime.register("renderer", renderer)
    runtime.register("echo", Echo())
    runtime.register_keyed("keyed", Keyed)
    flood = Flood(bus)
    try:
        async with runtime:
            await asyncio.to_thread(flood.sync)
            warm_up = TOTAL // 5
            for start in range(0, warm_up, 5000):
                await asyncio.to_thread(flood.send, start, start + 5000)
                await asyncio.to_thread(flood.sync)
            # Every table is at its bound by now. From here on, what Python allocates and
            # keeps is traced (exact); the RSS (allocator and libzmq buffers included) moves
            # by +-10 MiB between samples on its own, so it gets a loose bound only.
            # Every table's entries are replaced many times over in the next 20k messages,
            # so from then on the traced memory is what the process keeps.
            gc.collect()
            full = rss_bytes()
            tracemalloc.start()
            try:
                for start in range(warm_up, TOTAL, 5000):
                    await asyncio.to_thread(flood.send, start, start + 5000)
                    await asyncio.to_thread(flood.sync)
                    if start == 2 * warm_up - 5000:
                        gc.collect()
                        churned = tracemalloc.get_traced_memory()[0]
                gc.collect()
                kept = tracemalloc.get_traced_memory()[0] - churned
            finally:
                tracemalloc.stop()
            grown = rss_bytes() - full
            metrics = runtime.metrics()
            tracked, outgoing = (
                metrics.tables["incoming_streams"],
                metrics.tables["outgoing_streams"],
            )
            keyed = len(runtime.keyed_instances("keyed"))
            participants, players = len(renderer.ordering), len(renderer._players)
    finally:
        flood.close()
        broker.stop()
    assert metrics.delivered >= TOTAL  # nothing was lost on the way: every message was handled
    assert tracked <= BOUNDS["stream_capacity"] and outgoing <= BOUNDS["outgoing_streams"]
    assert keyed <= BOUNDS["keyed_instances"]
    assert participants <= RENDERER_PARTICIPANTS and players <= RENDERER_PARTICIPANTS
    assert metrics.tables["incoming_streams"] == tracked and metrics.tables["keyed[keyed]"] == keyed
    assert metrics.evicted_by["incoming_streams"] >= TOTAL - BOUNDS["stream_capacity"]
    assert metrics.evicted_by["outgoing_streams"] >= TOTAL // 4 - BOUNDS["outgoing_streams"]
    assert metrics.evicted_by["keyed"] >= TOTAL // 4 - BOUNDS["keyed_instances"]
    assert renderer.ordering.counts["participants_evicted"] >= TOTAL // 4 - RENDERER_PARTICIPANTS
    assert (
        metrics.gauges["voice.participants_evicted"]
        == renderer.ordering.counts["participants_evicted"]
    )
    assert metrics.faults == 0 and metrics.actor_restarts == 0
    assert kept < 2**20, f"Python kept {kept / 2**20:.2f} MiB more over the last 60k messages"
    assert grown < 48 * 2**20, f"RSS grew {grown / 2**20:.1f} MiB after the tables were full"


async def test_the_router_keeps_state_for_at_most_max_participants_and_counts_the_rest():
    log = Log()
    chat = Destination("chat", log)
    router = AgentRouter(
        {"chat": chat},
        Decisions(log, *["chat"] * 500),
        output=router_output(log),
        max_participants=50,
    )
    for index in range(500):
        await router.handle(AgentTurn(f"p{index}", f"t{index}", "hello", timestamp_us=1))
    assert len(router._lanes) == 50
    assert router.participants_evicted == 450
    assert router.gauges() == {"router.participants": 50, "router.participants_evicted": 450}
    assert list(router._lanes)[-1] == "p499"  # the most recently active are the ones kept
