"""CURVE identities bound to participants (``[bus.identities.NAME] participants``), through a
real broker process (``xrmq bus --config``) on tcp loopback with CurveZMQ: a client key
``alice`` bound to participant ``alice`` cannot ask as carol (dropped, counted, logged), does
not receive dave's answers on a whole-topic subscription, is denied a subscription to
dave's, and still works end to end as alice. ``box`` stands in for the box's own actors:
no ``participants`` key, every participant."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
import zmq

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext
from xrmq.schemas import ResponseOutput, RuntimeMetrics, UserQuery
from xrmq.topics import QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from buses import expect_line, reap
from secure_bus import CurveClient, SecureBus, free_tcp_bus, make_keys

CLI = [sys.executable, "-m", "xrmq.actors.cli"]

CONFIG = """
[bus]
address = "{bus}"

[bus.security]
mode = "curve"
keys = "keys"
rescan_s = 0

[bus.identities.alice]
publish = ["voice.query"]
sources = ["text-input"]
subscribe = ["voice.output", "voice.turn_ended"]
participants = ["alice"]

[bus.identities.box]
publish = ["voice.output", "voice.turn_ended"]
sources = ["*"]
subscribe = ["voice.query"]

[bus.identities.ops]
subscribe = ["xrmq.metrics"]
"""


@dataclass
class BrokerProcess:
    bus: str
    keys: Path
    proc: subprocess.Popen

    def key(self, name: str) -> Path:
        return self.keys / f"{name}.key_secret"

    def runtime(self, name: str, **kwargs) -> AgentRuntime:
        return AgentRuntime(
            self.bus, key=self.key(name), server_key=self.keys / "broker.key", **kwargs
        )

    def client(self, name: str) -> CurveClient:
        return CurveClient(SecureBus(self.bus, self.keys, None), name)  # type: ignore[arg-type]  # no in-process broker


@pytest.fixture
def broker(tmp_path) -> Iterator[BrokerProcess]:
    keys = make_keys(tmp_path / "keys", "broker", "xrmq-up", "alice", "box", "ops")
    bus = free_tcp_bus()
    config = tmp_path / "edge.toml"
    config.write_text(CONFIG.format(bus=bus))
    proc = subprocess.Popen(
        [*CLI, "bus", "--bus", bus, "--config", str(config), "--metrics-interval", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "XRMQ_LOG_LEVEL": "WARNING"},
    )
    try:
        expect_line(proc, "xrmq bus: ready")
        yield BrokerProcess(bus, keys, proc)
    finally:
        reap(proc)


def data_keys(received: list[list[bytes]]) -> list[bytes]:
    """The keys of the messages received, without control frames (a readiness probe still
    on its way back when its round was over: its key goes on after the second NUL)."""
    return [frames[0] for frames in received if frames[0].endswith(b"\x00")]


def broker_metrics(ops: CurveClient, until, timeout: float = 20.0) -> RuntimeMetrics:
    """The broker's heartbeats, read until one satisfies ``until``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if ops.sub.poll(50):
            frames = ops.sub.recv_multipart()
            if frames[0] != b"xrmq.metrics\x00\x00":
                continue
            metrics = msgspec.msgpack.decode(frames[2], type=RuntimeMetrics)
            if metrics.runtime == "broker":
                last = metrics
                if until(metrics):
                    return metrics
    raise TimeoutError(f"no broker heartbeat as expected within {timeout}s (last: {last})")


class Box(Agent):
    """The box's side: records the queries it gets and answers each for its participant."""

    def __init__(self) -> None:
        self.queries: list[tuple[str | None, str]] = []
        self.asked = asyncio.Event()

    def handlers(self):
        return {QUERY_TOPIC: self.on_query}

    async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
        self.queries.append((ctx.metadata.participant_id, query.text))
        self.asked.set()
        await ctx.publish(
            VOICE_OUTPUT_TOPIC,
            ResponseOutput("reply", f"answer to {query.text}", ctx.metadata.message_id),
            participant_id=ctx.metadata.participant_id,
            source="conversation",
        )


class Listener(Agent):
    """A client's side: every answer it receives, as (participant, text)."""

    def __init__(self) -> None:
        self.answers: list[tuple[str | None, str]] = []
        self.changed = asyncio.Event()

    def handlers(self):
        return {VOICE_OUTPUT_TOPIC: self.on_output}

    async def on_output(self, output: ResponseOutput, ctx: RuntimeContext) -> None:
        self.answers.append((ctx.metadata.participant_id, output.text))
        self.changed.set()

    async def wait_for(self, text: str) -> None:
        while not any(said == text for _, said in self.answers):
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 10)


@pytest.mark.timeout(60)
async def test_alice_publishing_as_carol_is_dropped_and_counted_and_logged(broker):
    box = Box()
    box_runtime = broker.runtime("box")
    box_runtime.register("box", box)
    alice = broker.runtime("alice")
    ops = broker.client("ops")
    try:
        ops.subscribe(b"xrmq.metrics\x00")
        async with box_runtime, alice:
            for participant in ("carol", "alice"):
                alice.send(
                    QUERY_TOPIC,
                    UserQuery(f"{participant}'s door code?", 1),
                    participant_id=participant,
                    source="text-input",
                )
            # one connection, in order: carol's was decided before alice's arrived
            await asyncio.wait_for(box.asked.wait(), 10)
        assert box.queries == [("alice", "alice's door code?")]
        metrics = await asyncio.to_thread(broker_metrics, ops, lambda m: bool(m.dropped))
        assert metrics.dropped == {"alice": 1}
    finally:
        ops.close()
    reap(broker.proc)
    assert "may not speak as participant 'carol'" in broker.proc.stderr.read()


@pytest.mark.timeout(60)
async def test_alices_whole_topic_subscription_does_not_receive_daves_answers(broker):
    box = broker.runtime("box")
    listener = Listener()
    alice = broker.runtime("alice")
    alice.register("listener", listener)  # every participant's voice.output, as far as it asks
    async with box, alice:
        for participant in ("dave", "alice"):
            box.send(
                VOICE_OUTPUT_TOPIC,
                ResponseOutput("reply", f"{participant}'s door code is 4711", "q1"),
                participant_id=participant,
                source="conversation",
            )
        # one connection, in order: had dave's been sent to alice, it would be here first
        await listener.wait_for("alice's door code is 4711")
    assert listener.answers == [("alice", "alice's door code is 4711")]


@pytest.mark.timeout(60)
async def test_a_subscription_to_daves_answers_is_denied_and_counted(broker):
    spy = broker.client("alice")
    ops = broker.client("ops")
    box = broker.runtime("box")
    try:
        ops.subscribe(b"xrmq.metrics\x00")
        spy.subscribe(b"voice.output\x00dave\x00")
        await asyncio.to_thread(spy.wait_ready)  # its subscriptions were decided in order
        async with box:
            for participant in ("dave", "alice"):
                box.send(
                    VOICE_OUTPUT_TOPIC,
                    ResponseOutput("reply", f"{participant}'s answer", "q1"),
                    participant_id=participant,
                    source="conversation",
                )
            spy.subscribe(b"voice.output\x00alice\x00")
            await asyncio.to_thread(spy.wait_ready)
            box.send(
                VOICE_OUTPUT_TOPIC,
                ResponseOutput("reply", "alice's second answer", "q2"),
                participant_id="alice",
                source="conversation",
            )
            got = await asyncio.to_thread(spy.wait_for, "voice.output")
        assert data_keys(got) == [b"voice.output\x00alice\x00"]
        metrics = await asyncio.to_thread(broker_metrics, ops, lambda m: bool(m.denied))
        assert metrics.denied == {"alice": 1}
    finally:
        spy.close()
        ops.close()


@pytest.mark.timeout(60)
async def test_a_client_asking_as_carol_is_not_ready_and_says_which_subscription(broker):
    alice = broker.runtime("alice", ready_timeout=1.0)
    alice.register("listener", Listener(), participant_id="carol")
    with pytest.raises(
        TimeoutError, match="may it subscribe to voice.output as participant 'carol'"
    ):
        await alice.start()
    await alice.stop()


@pytest.mark.timeout(60)
async def test_alice_as_alice_works_end_to_end(broker):
    box = broker.runtime("box")
    box.register("box", Box())
    listener = Listener()
    alice = broker.runtime("alice")
    alice.register("listener", listener, participant_id="alice")  # as xrmq say does
    async with box, alice:
        alice.send(
            QUERY_TOPIC, UserQuery("my door code?", 1), participant_id="alice", source="text-input"
        )
        await listener.wait_for("answer to my door code?")
    assert listener.answers == [("alice", "answer to my door code?")]


class RawSubscriber:
    """alice's key on an XSUB socket, which filters nothing itself (a SUB drops what its own
    subscriptions do not match): what reaches it is what the broker sent."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.client = broker.client("alice")
        bus = SecureBus(broker.bus, broker.keys, None)  # type: ignore[arg-type]  # no in-process broker
        self.xsub = self.client._socket(zmq.XSUB, bus, "alice")
        self.xsub.connect(bus.address.subscribe)
        self.probe = f"_probe.{self.client.sender}".encode() + b"\x00"
        self.xsub.send(b"\x01" + self.probe)

    def subscribe(self, prefix: bytes) -> None:
        self.xsub.send(b"\x01" + prefix)

    def unsubscribe(self, prefix: bytes) -> None:
        self.xsub.send(b"\x00" + prefix)

    def wait_ready(self, timeout: float = 10.0) -> None:
        """A probe comes back: every (un)subscription sent before it was applied."""
        probe = self.probe + b"\x00?" + uuid.uuid4().hex.encode()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.client.pub.send_multipart([probe, b"", b""])
            if self.xsub.poll(20) and self.xsub.recv_multipart()[0] == probe:
                while self.xsub.poll(0):
                    self.xsub.recv_multipart()
                return
        raise TimeoutError("no probe came back")

    def wait_for(self, topic: str) -> list[list[bytes]]:
        return self.client.wait_for(topic, self.xsub)

    def close(self) -> None:
        self.xsub.close(linger=0)
        self.client.close()


@pytest.mark.timeout(60)
async def test_an_unsubscription_removes_what_a_bound_subscription_was_narrowed_to(broker):
    alice = RawSubscriber(broker)
    box = broker.client("box")
    try:
        alice.subscribe(b"voice.output\x00")
        alice.subscribe(b"voice.turn_ended\x00")
        await asyncio.to_thread(alice.wait_ready)
        await asyncio.to_thread(box.wait_ready)
        for participant in ("dave", "alice"):
            box.send("voice.output", participant, {"text": "first"})
        first = await asyncio.to_thread(alice.wait_for, "voice.output")
        assert data_keys(first) == [b"voice.output\x00alice\x00"]
        alice.unsubscribe(b"voice.output\x00")
        await asyncio.to_thread(alice.wait_ready)  # its unsubscription was decided before
        box.send("voice.output", "alice", {"text": "second"})
        box.send("voice.turn_ended", "alice", {"text": "ended"})
        # one connection, in order: had voice.output stayed subscribed, it would be here first
        rest = await asyncio.to_thread(alice.wait_for, "voice.turn_ended")
        assert data_keys(rest) == [b"voice.turn_ended\x00alice\x00"]
    finally:
        alice.close()
        box.close()


class Answerer(Agent):
    """Answers an ask on ``voice.query`` with its reply (to the asker's inbox)."""

    def handlers(self):
        return {QUERY_TOPIC: self.on_query}

    async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> str:
        return f"{ctx.metadata.participant_id}: answer to {query.text}"


@pytest.mark.timeout(60)
async def test_alices_ask_as_alice_is_answered_in_her_narrowed_inbox(broker):
    box = broker.runtime("box")
    box.register("answerer", Answerer())
    alice = broker.runtime("alice")
    async with box, alice:
        answer = await alice.ask(
            QUERY_TOPIC,
            UserQuery("my door code?", 1),
            reply_type=str,
            participant_id="alice",
            source="text-input",
            timeout=10,
        )
    assert answer == "alice: answer to my door code?"
