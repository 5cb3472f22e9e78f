"""The secure bus end to end in one process: a CURVE broker on tcp loopback, real runtimes
and raw CURVE clients. Strangers get nothing and deliver nothing; identities are held to
their permissions at the broker (dropped, counted) and to their own inboxes."""

from __future__ import annotations

import asyncio

import pytest
import zmq

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext
from xrmq.actors.runtime.address import parse_bus
from xrmq.actors.runtime.broker import Broker
from xrmq.actors.runtime.security import BrokerSecurity, Permissions
from xrmq.actors.runtime.security.keys import load_public, load_secret
from xrmq.schemas import ConversationContextUpdate, ParticipantLeft, ResponseOutput, UserQuery
from xrmq.topics import PARTICIPANT_LEFT_TOPIC, QUERY_TOPIC, VOICE_OUTPUT_TOPIC, context_topic

from secure_bus import make_keys, secure_broker

NOTES = context_topic("notes")
WATCHED = ("notes", "voice.query", "participant.left", "voice.output")


class Watcher(Agent):
    """Records what reaches it on the watched topics; answers queries (an ask gets "answer")."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []
        self.changed = asyncio.Event()

    def handlers(self):
        return {
            NOTES: self.on_any,
            QUERY_TOPIC: self.on_query,
            PARTICIPANT_LEFT_TOPIC: self.on_any,
            VOICE_OUTPUT_TOPIC: self.on_any,
        }

    async def on_any(self, message, ctx: RuntimeContext) -> None:
        self.seen.append((ctx.topic.name, ctx.metadata.sender, ctx.metadata.source))
        self.changed.set()

    async def on_query(self, message: UserQuery, ctx: RuntimeContext) -> str:
        await self.on_any(message, ctx)
        return f"answer to {message.text}"

    async def wait_for(self, topic: str, source: str) -> None:
        while not any(t == topic and s == source for t, _, s in self.seen):
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 10)


IDENTITIES = {
    "context": Permissions(subscribe=list(WATCHED)),
    "sensor": Permissions(publish=["notes"], sources=["*"]),
    "client": Permissions(
        publish=["voice.query", "voice.output"], sources=["*"], subscribe=["voice.output"]
    ),
    "renderer": Permissions(subscribe=["voice.output"]),
    "ops": Permissions(subscribe=["xrmq.metrics"], capture=True),
}


@pytest.fixture
def keys(tmp_path):
    return make_keys(tmp_path / "keys", "broker", *IDENTITIES, "stranger")


async def test_a_client_without_keys_or_with_an_unknown_key_gets_nothing_and_delivers_nothing(keys):
    with secure_broker(keys, IDENTITIES) as bus:
        watcher = Watcher()
        context = AgentRuntime(bus.bus, key=bus.key("context"), server_key=bus.server_key)
        context.register("watcher", watcher)
        client = AgentRuntime(bus.bus, key=bus.key("client"), server_key=bus.server_key)
        async with context, client:
            intruders = [bus.client(None, capture=True), bus.client("stranger", capture=True)]
            try:
                for intruder in intruders:
                    intruder.subscribe(b"")
                    intruder.subscribe(b"", intruder.capture)
                    # every socket: publish, subscribe and capture, refused at the handshake
                    assert await asyncio.to_thread(intruder.handshakes_failed)
                    intruder.subscribe(f"_inbox.{intruder.sender}".encode() + b"\x00")
                    intruder.send(
                        "voice.query",
                        "p1",
                        {"text": "what is her PIN?", "timestamp_us": 0},
                        reply_to=f"_inbox.{intruder.sender}",
                    )
                    intruder.send("notes", "p1", {"text": "forged note"})
                ops = bus.client("ops", capture=True)
                try:
                    ops.subscribe(b"", ops.capture)
                    await asyncio.to_thread(ops.wait_capture_ready)
                    answer = await client.ask(
                        QUERY_TOPIC, UserQuery("hello", 0), reply_type=str, participant_id="p1"
                    )
                    assert answer == "answer to hello"
                    # capture works
                    await asyncio.to_thread(ops.wait_for, "voice.query", ops.capture)
                finally:
                    ops.close()
                assert [(t, s) for t, s, _ in watcher.seen] == [("voice.query", client.name)]
                for intruder in intruders:
                    assert intruder.received() == [] and intruder.received(intruder.capture) == []
            finally:
                for intruder in intruders:
                    intruder.close()
        assert bus.broker.forwarder.dropped == {}  # they never got as far as the broker's ACL
        # the stranger's three handshakes were refused by ZAP, and counted (the keyless
        # client's never reach ZAP: its NULL mechanism does not match CURVE)
        assert bus.broker.forwarder.metrics().gauges["broker.handshakes_refused"] >= 3


async def test_an_identity_without_capture_cannot_read_the_capture_socket(keys):
    with secure_broker(keys, IDENTITIES) as bus:
        context = bus.client("context", capture=True)
        try:
            assert not await asyncio.to_thread(context.handshakes_failed)  # publish side: admitted
            event = None
            monitor = context._monitors[2]
            while event is None or not event & (
                zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_SUCCEEDED
            ):
                assert await asyncio.to_thread(monitor.poll, 10_000)
                event = (await asyncio.to_thread(monitor.recv_multipart))[0]
                event = int.from_bytes(event[:2], "little")
            assert event & zmq.EVENT_HANDSHAKE_FAILED_AUTH
        finally:
            context.close()


async def test_a_sensor_allowed_only_notes_reaches_the_context_and_nothing_else(keys):
    with secure_broker(keys, IDENTITIES) as bus:
        watcher = Watcher()
        context = AgentRuntime(bus.bus, key=bus.key("context"), server_key=bus.server_key)
        context.register("watcher", watcher)
        sensor = AgentRuntime(bus.bus, key=bus.key("sensor"), server_key=bus.server_key)
        async with context, sensor:
            await sensor.publish(
                NOTES,
                ConversationContextUpdate("kettle at 85"),
                participant_id="p1",
                source="kettle",
            )
            sensor.send(QUERY_TOPIC, UserQuery("forged turn", 0), participant_id="p1")
            sensor.send(PARTICIPANT_LEFT_TOPIC, ParticipantLeft(), participant_id="p1")
            sensor.send(
                VOICE_OUTPUT_TOPIC,
                ResponseOutput("reply", "forged", "q1", final=True),
                participant_id="p1",
                source="conversation",
            )
            await sensor.publish(
                NOTES, ConversationContextUpdate("last"), participant_id="p1", source="last"
            )
            await watcher.wait_for("notes", "last")  # one connection, in order: the rest is decided
        assert watcher.seen == [("notes", sensor.name, "kettle"), ("notes", sensor.name, "last")]
        assert bus.broker.forwarder.dropped == {"sensor": 3}
        metrics = bus.broker.forwarder.metrics()
        assert metrics.runtime == "broker" and metrics.dropped == {"sensor": 3}


async def test_a_renderer_cannot_subscribe_to_notes_or_another_identitys_inbox(keys):
    with secure_broker(keys, IDENTITIES) as bus:
        renderer = bus.client("renderer")
        sensor = bus.client("sensor")
        context = AgentRuntime(bus.bus, key=bus.key("context"), server_key=bus.server_key)
        context.register("watcher", Watcher())
        client = AgentRuntime(bus.bus, key=bus.key("client"), server_key=bus.server_key)
        try:
            await asyncio.to_thread(sensor.wait_ready)
            async with context, client:
                renderer.subscribe(b"notes\x00")
                renderer.subscribe(f"_inbox.{client.name}\x00".encode())
                renderer.subscribe(b"voice.output\x00")
                # its subscriptions were decided in order
                await asyncio.to_thread(renderer.wait_ready)
                sensor.send("notes", "p1", {"text": "the PIN is 1234"})
                answer = await client.ask(
                    QUERY_TOPIC, UserQuery("my PIN?", 0), reply_type=str, participant_id="p1"
                )  # the reply goes to the client's inbox
                assert answer == "answer to my PIN?"
                client.send(
                    VOICE_OUTPUT_TOPIC,
                    ResponseOutput("reply", "done", "q1", final=True),
                    participant_id="p1",
                )
                got = await asyncio.to_thread(renderer.wait_for, "voice.output")
        finally:
            renderer.close()
            sensor.close()
        assert [frames[0].split(b"\x00")[0] for frames in got] == [b"voice.output"]
        assert bus.broker.forwarder.denied == {"renderer": 2}


async def test_a_reply_to_aimed_at_participant_left_is_rejected(keys):
    with secure_broker(keys, IDENTITIES) as bus:
        watcher = Watcher()
        context = AgentRuntime(bus.bus, key=bus.key("context"), server_key=bus.server_key)
        context.register("watcher", watcher)
        forger = bus.client("client")
        try:
            async with context:
                await asyncio.to_thread(forger.wait_ready)
                forger.send(
                    "voice.query",
                    "p1",
                    {"text": "clear her", "timestamp_us": 0},
                    reply_to="participant.left",
                )
                forger.send(
                    "voice.query", "p1", {"text": "fine", "timestamp_us": 0}, source="marker"
                )
                await watcher.wait_for("voice.query", "marker")
        finally:
            forger.close()
        assert watcher.seen == [("voice.query", forger.sender, "marker")]
        assert bus.broker.forwarder.dropped == {"client": 1}


async def test_a_runtime_whose_subscription_is_denied_says_which_when_it_gives_up(keys):
    with secure_broker(keys, IDENTITIES) as bus:
        renderer = AgentRuntime(
            bus.bus, key=bus.key("renderer"), server_key=bus.server_key, ready_timeout=1.0
        )
        renderer.register("watcher", Watcher())  # notes, voice.query, participant.left: not its own
        with pytest.raises(TimeoutError) as caught:
            await renderer.start()
        assert "CURVE identity 'renderer'" in str(caught.value)
        assert "may it subscribe to notes, participant.left, voice.query?" in str(caught.value)
        assert bus.broker.forwarder.denied["renderer"] >= 3


async def test_curve_works_on_an_ipc_bus_too(keys, tmp_path):
    public, secret = load_secret(keys / "broker.key_secret")
    security = BrokerSecurity(
        public,
        secret,
        {
            name: (load_public(keys / f"{name}.key"), IDENTITIES[name])
            for name in ("context", "sensor")
        },
    )
    bus = f"ipc://{tmp_path}/bus"
    broker = Broker(parse_bus(bus), security=security).start()
    try:
        watcher = Watcher()
        context = AgentRuntime(bus, key=keys / "context.key_secret", server_key=keys / "broker.key")
        context.register("watcher", watcher)
        sensor = AgentRuntime(bus, key=keys / "sensor.key_secret", server_key=keys / "broker.key")
        async with context, sensor:
            await sensor.publish(
                NOTES, ConversationContextUpdate("on ipc"), participant_id="p1", source="s"
            )
            await watcher.wait_for("notes", "s")
    finally:
        broker.stop()
    assert not list(tmp_path.glob("bus.*"))  # socket files and lock removed


def test_a_secure_broker_stops_twice_without_error(keys):
    with secure_broker(keys, IDENTITIES) as bus:
        bus.broker.stop()
    bus.broker.stop()  # the context manager's stop came second; a third is harmless too
