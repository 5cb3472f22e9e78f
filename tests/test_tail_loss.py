"""Issue 13, item 6: a stream's lost last messages are reported by the sender's next heartbeat.

Nothing after a lost tail reveals the hole in ``seq``; the heartbeat does: it lists the
last seq the runtime sent on each key it sent on lately. The transport is a lossy
broker (``lossy_bus.py``) that drops one sender's last messages on one key.
"""

from __future__ import annotations

import asyncio
import time

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
