"""Issue 13, item 6: a stream's lost last messages are reported by the sender's next heartbeat.

Nothing after a lost tail reveals the hole in ``seq``; the heartbeat does: it lists the
last seq the runtime sent on each key it sent on lately. The transport is a lossy
broker (``lossy_bus.py``) that drops one sender's last messages on one key.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from subprocess import PIPE

import msgspec
import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, subscribe
from xrmq.schemas import ConversationContextUpdate, MessageMetadata, RuntimeMetrics
from xrmq.topics import METRICS_TOPIC, context_topic

from lossy_bus import LossyBus

pytestmark = pytest.mark.timeout(60)

NOTES = context_topic("tail.notes")
SENDER = "tail-sender"
_metadata = msgspec.msgpack.Decoder(MessageMetadata)


class Watcher(Agent):
    """Records, in mailbox order, the notes, the sender's heartbeats and the gap notices."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.changed = asyncio.Event()

    @subscribe(NOTES)
    async def on_note(self, message: ConversationContextUpdate, ctx) -> None:
        self.events.append(("note", message.text))
        self.changed.set()

    @subscribe(METRICS_TOPIC)
    async def on_metrics(self, message: RuntimeMetrics, ctx) -> None:
        if message.runtime == SENDER:
            self.events.append(("heartbeat", message.timestamp_us))
            self.changed.set()

    async def on_gap(self, gap, ctx) -> None:
        self.events.append(("gap", gap))
        self.changed.set()

    async def wait(self, predicate) -> None:
        while not predicate():
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 10)


async def test_a_senders_dropped_last_messages_are_reported_as_a_gap_by_its_next_heartbeat(
    tmp_path,
):
    def drop(frames: list[bytes]) -> bool:  # the sender's messages 6, 7 and 8 on tail.notes for p1
        return (
            len(frames) == 3
            and frames[0] == NOTES.key("p1")
            and bool(frames[1])
            and _metadata.decode(frames[1]).sender == SENDER
            and _metadata.decode(frames[1]).seq > 5
        )

    bus = LossyBus(f"{tmp_path}/bus", drop)
    try:
        watcher = Watcher()
        receiver = AgentRuntime(bus.address)
        receiver.register("watcher", watcher)
        async with receiver:
            async with AgentRuntime(bus.address, name=SENDER, metrics_interval=0.2) as sender:
                for index in range(1, 9):  # no loop pass in between: no heartbeat among them
                    await sender.publish(
                        NOTES, ConversationContextUpdate(f"n{index}"), participant_id="p1"
                    )
                sent_us = time.time_ns() // 1000
                await watcher.wait(lambda: any(kind == "gap" for kind, _ in watcher.events))
            metrics = receiver.metrics()
    finally:
        bus.close()
    assert bus.dropped == 3
    notes = [value for kind, value in watcher.events if kind == "note"]
    assert notes == ["n1", "n2", "n3", "n4", "n5"]
    gap_at = next(index for index, (kind, _) in enumerate(watcher.events) if kind == "gap")
    gap = watcher.events[gap_at][1]
    assert (gap.topic, gap.participant_id, gap.sender, gap.first_missing, gap.last_missing) == (
        NOTES.name,
        "p1",
        SENDER,
        6,
        8,
    )
    # Within one heartbeat interval: no heartbeat sent after the loss came before the gap.
    late = [
        value for kind, value in watcher.events[:gap_at] if kind == "heartbeat" and value > sent_us
    ]
    assert late == []
    assert metrics.gaps == 3


async def test_a_reply_stream_that_lost_a_fragment_plays_what_arrived_and_ends_incomplete(tmp_path):
    """Issue 13, item 5's last sentence: the renderer never presents such a reply as complete."""
    from xrmq.actors.voice import VoiceRenderer
    from xrmq.actors.voice.sinks import RecordingSink
    from xrmq.schemas import ResponseOutput
    from xrmq.topics import VOICE_OUTPUT_TOPIC

    def drop(frames: list[bytes]) -> bool:  # the producer's second fragment for p1
        return (
            len(frames) == 3
            and frames[0] == VOICE_OUTPUT_TOPIC.key("p1")
            and bool(frames[1])
            and _metadata.decode(frames[1]).sender == "producer"
            and _metadata.decode(frames[1]).seq == 2
        )

    bus = LossyBus(f"{tmp_path}/bus", drop)
    sink = RecordingSink(words_per_minute=None)
    renderer = VoiceRenderer(sink)
    try:
        listener = AgentRuntime(bus.address)
        listener.register("renderer", renderer)
        async with listener:
            async with AgentRuntime(bus.address, name="producer") as producer:
                for text, final in (("Hello ", False), ("lost ", False), ("world.", True)):
                    await producer.publish(
                        VOICE_OUTPUT_TOPIC,
                        ResponseOutput(
                            kind="reply", text=text, request_id="q1", response_id="s1", final=final
                        ),
                        participant_id="p1",
                    )
                await asyncio.wait_for(sink.wait_until(lambda s: s.ended("p1")), 10)
                # An intact reply after it still ends completed.
                for text, final in (("All ", False), ("there.", True)):
                    await producer.publish(
                        VOICE_OUTPUT_TOPIC,
                        ResponseOutput(
                            kind="reply", text=text, request_id="q2", response_id="s2", final=final
                        ),
                        participant_id="p1",
                    )
                await asyncio.wait_for(sink.wait_until(lambda s: len(s.ended("p1")) == 2), 10)
            gauges = listener.metrics().gauges
    finally:
        bus.close()
    assert " ".join(sink.heard("p1")) == "Hello world. All there."
    assert sink.ended("p1") == ["incomplete", "completed"]
    assert gauges["voice.incomplete"] == 1


@pytest.mark.parametrize(
    "mode", ["final-heartbeat", "default-heartbeat", "final-heartbeat-dropped"]
)
async def test_a_tail_lost_under_overload_is_counted_exactly_without_configured_heartbeats(mode):
    """Issue 30 item 4: clients, sensors and ``xrmq publish`` run without
    ``metrics_interval``, and under overload 48 % of their notes were lost uncounted.
    A real broker (a 1,024-message HWM per subscriber) drops the tail of 20,000 notes for
    a subscriber that is stopped meanwhile; the publisher runs with the runtime's
    defaults. Its final heartbeat when it closes (its periodic one off, to pin the final
    one), or while it lives its default short heartbeat, makes the subscriber's loss count
    exactly what it did not receive. When the publisher closes while the subscriber is
    still stopped, the broker drops the final heartbeat for it too (its queue is full): the
    broker's own heartbeats repeat that final ``last_seq`` (``RuntimeMetrics.tails``), so
    the count is exact all the same."""
    from buses import broker_process, expect_line, python, reap

    total = 20_000
    closes = mode != "default-heartbeat"
    dropped = mode == "final-heartbeat-dropped"
    beats = ("--metrics-interval", "0.2") if dropped else ()
    with broker_process("--subscriber-budget-bytes", str(1 << 20), *beats) as bus:
        subscriber = python("tail_subscriber.py", bus, "tail.notes", str(total), "tail-publisher")
        heartbeat = "none" if closes else "default"  # closing: only its final heartbeat
        publisher = python(
            "tail_publisher.py", bus, "tail.notes", str(total), heartbeat, stdin=PIPE
        )
        try:
            expect_line(subscriber, "ready")
            expect_line(publisher, "ready")
            observer = Observer()
            runtime = AgentRuntime(bus, name="tail-observer")
            runtime.register("observer", observer)
            async with runtime:
                os.kill(subscriber.pid, signal.SIGSTOP)
                try:
                    command(publisher, "send")
                    await asyncio.to_thread(expect_line, publisher, "sent")
                    # The observer reads: once a mark sent after the notes reaches it, the
                    # broker has handled them all (and dropped the stopped subscriber's tail).
                    marked = asyncio.ensure_future(observer.marked.wait())
                    while not marked.done():
                        command(publisher, "mark")
                        await asyncio.wait([marked], timeout=0.05)
                    if dropped:  # closes while the subscriber's queue is full
                        command(publisher, "close")
                        await asyncio.to_thread(expect_line, publisher, "closed")
                finally:
                    os.kill(subscriber.pid, signal.SIGCONT)
                if not dropped:
                    # Whatever was queued for the subscriber is read before a sync note gets
                    # through to it: then a heartbeat reaches it.
                    synced = asyncio.create_task(
                        asyncio.to_thread(expect_line, subscriber, "synced")
                    )
                    while not synced.done():
                        await runtime.publish(SYNC, ConversationContextUpdate("sync"))
                        await asyncio.wait([synced], timeout=0.05)
                    await synced
                if closes and not dropped:
                    command(publisher, "close")
                    await asyncio.to_thread(expect_line, publisher, "closed")
                line = asyncio.create_task(asyncio.to_thread(expect_line, subscriber, "{"))
                done, _ = await asyncio.wait([line], timeout=10)
                if not done:
                    subscriber.kill()  # ends the read: the loss was never accounted for
                    await asyncio.wait([line])
                    pytest.fail("the subscriber never accounted for the publisher's lost tail")
                report = json.loads(line.result())
        finally:
            reap(publisher, subscriber)
    assert report["gaps"] > 0
    assert report["received"] + report["gaps"] == total


TAIL_MARK = context_topic("tail.notes.mark")
SYNC = context_topic("tail.notes.sync")


class Observer(Agent):
    """Learns that the broker has handled the tail publisher's notes: its mark arrived."""

    def __init__(self) -> None:
        self.marked = asyncio.Event()

    @subscribe(TAIL_MARK)
    async def on_mark(self, message: ConversationContextUpdate, ctx) -> None:
        self.marked.set()


def command(process, line: str) -> None:
    process.stdin.write(f"{line}\n")
    process.stdin.flush()


@pytest.mark.parametrize("field", ["heartbeat_s", "metrics_interval"])
@pytest.mark.parametrize("value", [0, -1.0])
def test_a_heartbeat_interval_that_is_not_positive_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=f"{field}: must be a positive number of seconds or None"):
        AgentRuntime(**{field: value})


async def test_a_runtime_that_published_announces_every_streams_last_seq_when_it_stops():
    """Issue 30 item 4: the final heartbeat lists every stream it numbered, however many
    (``HEARTBEAT_KEYS`` per message), even with the periodic heartbeat off."""
    from xrmq.actors.runtime.outgoing import HEARTBEAT_KEYS

    from buses import broker_process

    class Beats(Agent):
        def __init__(self) -> None:
            self.last_seq: dict[str, int] = {}
            self.changed = asyncio.Event()

        @subscribe(METRICS_TOPIC)
        async def on_metrics(self, message: RuntimeMetrics, ctx) -> None:
            if message.runtime == "stopping-sender":
                self.last_seq.update(message.last_seq)
                self.changed.set()

    streams = HEARTBEAT_KEYS + 44  # two final heartbeats
    beats = Beats()
    with broker_process() as bus:
        receiver = AgentRuntime(bus, name="beats-receiver", heartbeat_s=None)
        receiver.register("beats", beats)
        async with receiver:
            async with AgentRuntime(bus, name="stopping-sender", heartbeat_s=None) as sender:
                for index in range(streams):
                    sender.send(NOTES, ConversationContextUpdate("x"), participant_id=f"p{index}")
                sender.send(NOTES, ConversationContextUpdate("y"), participant_id="p0")
            while len(beats.last_seq) < streams:
                beats.changed.clear()
                await asyncio.wait_for(beats.changed.wait(), 10)
    assert beats.last_seq[NOTES.key("p0").decode()] == 2
    assert all(beats.last_seq[NOTES.key(f"p{i}").decode()] == 1 for i in range(1, streams))


async def test_a_stream_lost_whole_is_counted_from_its_senders_final_heartbeat(tmp_path):
    """Issue 30 item 4: ``xrmq publish`` sends one message and stops. If that message (or
    every message of a short-lived publisher) is lost, the receiver has no baseline for the
    stream; a heartbeat from a sender that started after the receiver's subscriptions were
    live names messages that were all bound for it, so they count from seq 1."""

    def drop(frames: list[bytes]) -> bool:  # every note of the one-shot sender
        return (
            len(frames) == 3
            and frames[0] == NOTES.key("p1")
            and bool(frames[1])
            and _metadata.decode(frames[1]).sender == "one-shot"
        )

    bus = LossyBus(f"{tmp_path}/bus", drop)
    try:
        watcher = Watcher()
        receiver = AgentRuntime(bus.address)
        receiver.register("watcher", watcher)
        async with receiver:
            async with AgentRuntime(bus.address, name="one-shot", heartbeat_s=None) as sender:
                for index in range(3):
                    await sender.publish(
                        NOTES, ConversationContextUpdate(f"n{index}"), participant_id="p1"
                    )
            await watcher.wait(lambda: any(kind == "gap" for kind, _ in watcher.events))
            gaps = [value for kind, value in watcher.events if kind == "gap"]
            metrics = receiver.metrics()
    finally:
        bus.close()
    assert bus.dropped == 3
    assert [
        (g.sender, g.topic, g.participant_id, g.first_missing, g.last_missing) for g in gaps
    ] == [("one-shot", NOTES.name, "p1", 1, 3)]
    assert metrics.gaps == 3


async def test_a_tail_lost_behind_a_stalled_broker_is_counted_exactly_after_the_publisher_closes(
    tmp_path,
):
    """Issue 30 item 4: a publisher that closes with more queued than the broker takes
    within ``ZMQ_LINGER`` (2 s) lost the rest at close, its final heartbeat with it, so the
    loss was counted nowhere. Its stop now waits until what it queued, the final heartbeat
    last, has passed the broker: with a broker stalled past the linger, the tail the
    broker then drops (the last 5 of 3,000 notes of 2 KB) is counted exactly."""
    total, tail = 3_000, 5

    def drop(frames: list[bytes]) -> bool:
        return (
            len(frames) == 3
            and frames[0] == NOTES.key("p1")
            and bool(frames[1])
            and _metadata.decode(frames[1]).sender == "closing-sender"
            and _metadata.decode(frames[1]).seq > total - tail
        )

    bus = LossyBus(f"{tmp_path}/bus", drop)
    try:
        watcher = Watcher()
        receiver = AgentRuntime(bus.address)
        receiver.register("watcher", watcher)
        async with receiver:
            sender = AgentRuntime(bus.address, name="closing-sender", heartbeat_s=None)
            await sender.start()
            bus.paused.set()
            for index in range(total):
                note = ConversationContextUpdate(f"{index} " + "z" * 2000)
                sender.send(NOTES, note, participant_id="p1")
            stopping = asyncio.ensure_future(sender.stop())
            done, _ = await asyncio.wait([stopping], timeout=3.0)  # past the 2 s linger
            assert not done, "the publisher closed with its tail and final heartbeat unsent"
            bus.paused.clear()
            await asyncio.wait_for(stopping, 20)
            await watcher.wait(lambda: any(kind == "gap" for kind, _ in watcher.events))
            metrics = receiver.metrics()
    finally:
        bus.close()
    notes = [value for kind, value in watcher.events if kind == "note"]
    assert len(notes) == total - tail and bus.dropped == tail
    gaps = [value for kind, value in watcher.events if kind == "gap"]
    assert [(g.first_missing, g.last_missing) for g in gaps] == [(total - tail + 1, total)]
    assert metrics.gaps == tail
