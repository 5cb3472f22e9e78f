"""Issue 13 in one process: no frame or fault ends an actor; the edge rejects, by category.

A real broker on an ipc bus under ``tmp_path``, runtimes in this process, and the raw
protocol client (``raw_client.py``) for the frames no xrmq runtime would send.
"""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, subscribe
from xrmq.actors.runtime.address import parse_bus
from xrmq.actors.runtime.broker import Broker
from xrmq.actors.runtime.ratelimit import AggregatedWarnings
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

from raw_client import RawClient

pytestmark = pytest.mark.timeout(60)

ECHO = context_topic("robust.echo")
NOTES = context_topic("robust.notes")


class Echo(Agent):
    @subscribe(ECHO)
    async def on_echo(self, message: ConversationContextUpdate, ctx) -> str:
        return f"{ctx.participant_id}:{message.text}"


class Collector(Agent):
    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []
        self.arrived = asyncio.Event()

    @subscribe(NOTES)
    async def on_note(self, message: ConversationContextUpdate, ctx) -> None:
        self.texts.append((ctx.metadata.sender, message.text))
        self.arrived.set()

    async def wait_for(self, value: str) -> None:
        while not any(text == value for _, text in self.texts):
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 10)


@pytest.fixture
def bus(tmp_path):
    address = f"ipc://{tmp_path}/bus"
    broker = Broker(parse_bus(address)).start()
    try:
        yield address
    finally:
        broker.stop()


def raw_client(bus: str) -> RawClient:
    client = RawClient(bus)
    client.wait_ready()
    return client


def key(topic, participant: str | None) -> bytes:
    return topic.name.encode() + b"\x00" + (participant or "").encode() + b"\x00"


def text(value: str) -> bytes:
    return msgspec.msgpack.encode({"text": value})


async def settle(runtime: AgentRuntime, participant: str = "p1") -> str:
    """The echo actor still answers. (Frames from a raw client are not ordered with this ask,
    which takes the runtime's own connection: a test waits for a good frame sent after them.)"""
    return await runtime.ask(
        ECHO,
        ConversationContextUpdate("still here"),
        participant_id=participant,
        reply_type=str,
        timeout=10,
    )


async def test_an_empty_participant_with_reply_to_is_rejected_twice_and_the_actor_still_answers(
    bus,
):
    collector = Collector()
    runtime = AgentRuntime(bus)
    runtime.register("echo", Echo())
    runtime.register("notes", collector)
    async with runtime:
        client = raw_client(bus)
        try:
            for seq in (1, 2):  # the two frames that used to end the actor's mailbox task
                client.send_frames(
                    [key(ECHO, None), client.metadata(seq, "", reply_to="_inbox.x"), text("boom")]
                )
            # On the same connection, so it arrives after both (the runtime's own ask
            # below takes another connection, which the broker does not order with it).
            client.send(NOTES.name, "p1", 1, {"text": "after"})
            await collector.wait_for("after")
            assert await settle(runtime) == "p1:still here"
        finally:
            client.close()
        metrics = runtime.metrics()
    assert metrics.rejected_by == {"participant": 2}
    assert metrics.faults == 0 and metrics.actor_restarts == 0


async def test_every_edge_rule_rejects_and_counts_its_category_and_good_frames_still_pass(bus):
    collector = Collector()
    runtime = AgentRuntime(bus, epoch_skew_s=60)
    runtime.register("echo", Echo())
    runtime.register("notes", collector)
    async with runtime:
        client = raw_client(bus)
        now_us = time.time_ns() // 1000
        meta = client.metadata
        bad = {
            "frames": [
                [key(NOTES, "p1")],
                [key(NOTES, "p1"), meta(1, "p1")],
                [key(NOTES, "p1"), meta(1, "p1"), text("a"), b"extra"],
            ],
            "key": [[b"robust.notes\x00p1", meta(1, "p1"), text("a")]],
            "metadata": [
                [key(NOTES, "p1"), b"\xc1garbage", text("a")],
                [key(NOTES, "p1"), b"\x81\xa4text" + b"\x91" * 100_000 + b"\xc0", text("a")],
                [
                    key(NOTES, "p1"),
                    meta(1, "p1", source="FUZZ").replace(b"\xa4FUZZ", b"\xa4\xff\xfe\xfd\xfc"),
                    text("a"),
                ],
            ],
            "seq": [
                [key(NOTES, "p1"), meta(0, "p1"), text("a")],
                [key(NOTES, "p1"), meta(2**53 + 1, "p1"), text("a")],
            ],
            "epoch": [
                [key(NOTES, "p1"), meta(1, "p1", epoch=2**63, sender="router"), text("a")],
                [key(NOTES, "p1"), meta(1, "p1", epoch=now_us + 3600 * 10**6), text("a")],
            ],
            "participant": [
                [key(NOTES, "p1"), meta(1, "p2"), text("a")],
                [key(NOTES, "p1"), meta(1, None), text("a")],
                [key(NOTES, None), meta(1, "p1"), text("a")],
                [key(NOTES, None), meta(1, ""), text("a")],
                [b"robust.notes\x00\xff\xfe\x00", meta(1, "p1"), text("a")],
            ],
            "reply_to": [
                [key(ECHO, "p1"), meta(1, "p1", reply_to=reply_to), text("a")]
                for reply_to in ("robust.notes", "_inbox.", "")
            ],
            "payload": [
                [key(NOTES, "p1"), meta(1, "p1"), msgspec.msgpack.encode({"nope": 1})],
                [key(NOTES, "p1"), meta(1, "p1"), b"\x81\xa4text" + b"\x91" * 100_000 + b"\xc0"],
            ],
        }
        try:
            for messages in bad.values():
                for frames in messages:
                    client.send_frames(frames)
            client.send(NOTES.name, "p1", 1, {"text": "good"})
            await collector.wait_for("good")
            assert await settle(runtime) == "p1:still here"
        finally:
            client.close()
        metrics = runtime.metrics()
    assert metrics.rejected_by == {category: len(messages) for category, messages in bad.items()}
    assert metrics.rejected == sum(len(messages) for messages in bad.values())
    assert collector.texts == [(client.sender, "good")]
    assert metrics.faults == 0


async def test_a_forged_epoch_never_makes_the_real_senders_messages_stale_nor_after_its_restart(
    bus,
):
    collector = Collector()
    receiver = AgentRuntime(bus)
    receiver.register("notes", collector)
    async with receiver:
        client = raw_client(bus)
        try:

            async def real_sender_says(*texts: str) -> None:
                async with AgentRuntime(bus, name="router") as real:
                    # Forgeries under the real sender's name: 2**63 and a plausible newer epoch.
                    for epoch in (2**63, real.epoch + 1_000_000):
                        client.send_frames(
                            [
                                key(NOTES, "p1"),
                                client.metadata(10**9, "p1", sender="router", epoch=epoch),
                                text("forged"),
                            ]
                        )
                    for value in texts:
                        await real.publish(
                            NOTES, ConversationContextUpdate(value), participant_id="p1"
                        )
                        await collector.wait_for(value)

            await real_sender_says("one", "two")
            await real_sender_says("three")  # a restart of the real sender: a new epoch
        finally:
            client.close()
        metrics = receiver.metrics()
    real = [value for sender, value in collector.texts if value != "forged"]
    assert real == ["one", "two", "three"]
    assert metrics.stale == 0 and metrics.rejected_by == {"epoch": 2}


async def test_a_reply_that_cannot_be_sent_is_a_fault_of_the_actor_which_takes_the_next_message(
    bus,
):
    runtime = AgentRuntime(bus)
    runtime.register("echo", Echo())
    async with runtime:
        real_reply = runtime.reply
        broken = [True]

        def reply(request, result, *, error=None):
            if broken:
                broken.clear()
                raise ValueError("participant_id: must be a non-empty string without NUL")
            real_reply(request, result, error=error)

        runtime.reply = reply
        with pytest.raises(TimeoutError):
            await runtime.ask(
                ECHO, ConversationContextUpdate("lost"), participant_id="p1", timeout=0.5
            )
        assert await settle(runtime) == "p1:still here"
        metrics = runtime.metrics()
    assert metrics.actor_faults == {"echo": 1} and metrics.faults == 1
    assert metrics.actor_restarts == 0


async def test_a_failing_handler_and_hook_are_counted_per_actor(bus):
    class Failing(Agent):
        async def on_start(self) -> None:
            raise RuntimeError("start failed")

        @subscribe(ECHO)
        async def on_echo(self, message, ctx) -> str:
            if message.text == "fail":
                raise RuntimeError("handler failed")
            return "ok"

    runtime = AgentRuntime(bus)
    runtime.register("failing", Failing())
    async with runtime:
        with pytest.raises(Exception, match="handler failed"):
            await runtime.ask(
                ECHO, ConversationContextUpdate("fail"), participant_id="p1", timeout=10
            )
        assert (
            await runtime.ask(
                ECHO,
                ConversationContextUpdate("x"),
                participant_id="p1",
                reply_type=str,
                timeout=10,
            )
            == "ok"
        )
        metrics = runtime.metrics()
    assert metrics.actor_faults == {"failing": 2} and metrics.handler_errors == 2


async def test_a_mailbox_task_that_ends_anyway_is_restarted_and_counted(bus):
    runtime = AgentRuntime(bus)
    runtime.register("echo", Echo())
    async with runtime:
        mailbox = runtime._agents["echo"]
        first = mailbox._task
        first.cancel()  # ends the worker from outside: nothing in the actor's path can do that now
        with pytest.raises(asyncio.CancelledError):
            await first
        assert mailbox._task is not first
        assert await settle(runtime) == "p1:still here"
        assert runtime.metrics().actor_restarts == 1


def test_repeated_warnings_are_logged_once_per_kind_topic_and_sender_per_interval_with_the_count():
    lines: list[tuple[str, dict]] = []

    class Log:
        def warning(self, event, **fields):
            lines.append((event, fields))

    now = [0.0]
    warnings = AggregatedWarnings(Log(), interval_s=10, capacity=3, clock=lambda: now[0])
    for _ in range(1000):
        warnings.warn("bus.frame_rejected", "notes", "fuzz", category="participant")
    warnings.warn("bus.frame_rejected", "notes", "other", category="participant")
    warnings.warn("bus.gap", "notes", "fuzz", first_missing=3)
    assert [event for event, _ in lines] == ["bus.frame_rejected", "bus.frame_rejected", "bus.gap"]
    # more (kind, topic, sender) than the table holds: aggregated under "*"
    for sender in range(100):
        warnings.warn("bus.stale", "notes", f"s{sender}")
    assert len(warnings) == 4 and lines[-1][0] == "bus.stale"
    now[0] = 10.0
    warnings.flush()
    repeated = {
        (fields["topic"], fields["sender"]): fields["count"]
        for event, fields in lines
        if event.endswith(".repeated")
    }
    assert repeated == {("notes", "fuzz"): 999, ("*", "*"): 99}
    assert len(warnings) == 0


async def test_a_keyed_kind_over_its_bound_retires_the_least_recently_used_idle_instance(bus):
    stopped: list[str] = []
    retired = asyncio.Event()

    class Counter(Agent):
        def __init__(self, key: str) -> None:
            self.key, self.count = key, 0

        async def on_stop(self) -> None:
            stopped.append(self.key)
            retired.set()

        @subscribe(ECHO)
        async def on_echo(self, message, ctx) -> int:
            self.count += 1
            return self.count

    runtime = AgentRuntime(bus)
    runtime.register_keyed("counter", Counter, max_instances=2)
    async with runtime:

        async def ask(key: str) -> int:
            return await runtime.ask(
                ECHO, ConversationContextUpdate("x"), participant_id=key, reply_type=int, timeout=10
            )

        assert [await ask("a"), await ask("b"), await ask("a")] == [1, 1, 2]
        assert await ask("c") == 1  # "b" is the least recently used: retired
        # The retirement's on_stop runs in a task of its own.
        await asyncio.wait_for(retired.wait(), 10)
        assert sorted(runtime.keyed_instances("counter")) == ["a", "c"]
        assert await ask("a") == 3 and await ask("b") == 1  # "b" starts afresh; now "c" goes
        metrics = runtime.metrics()
    assert stopped[:2] == ["b", "c"]
    assert metrics.evicted_by["keyed"] == 2 and metrics.tables["keyed[counter]"] == 2


async def test_a_forged_higher_seq_under_the_real_epoch_costs_the_real_sender_two_messages_only(
    bus,
):
    collector = Collector()
    receiver = AgentRuntime(bus)
    receiver.register("notes", collector)
    async with receiver:
        async with AgentRuntime(bus, name="router") as real:
            await real.publish(NOTES, ConversationContextUpdate("one"), participant_id="p1")
            await collector.wait_for("one")
            client = raw_client(bus)
            try:  # the real sender's name and epoch, read off the bus, and a seq far ahead
                forged = client.metadata(10**9, "p1", sender="router", epoch=real.epoch)
                client.send_frames([key(NOTES, "p1"), forged, text("forged")])
                await collector.wait_for("forged")
            finally:
                client.close()
            for value in ("two", "three", "four", "five"):
                await real.publish(NOTES, ConversationContextUpdate(value), participant_id="p1")
            await collector.wait_for("five")
        metrics = receiver.metrics()
    assert [value for _, value in collector.texts] == ["one", "forged", "four", "five"]
    assert metrics.stale == 2 and metrics.resynced == 1
