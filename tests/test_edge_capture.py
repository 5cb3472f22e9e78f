"""``xrmq record`` / ``xrmq replay``: the capture file format, the replay pace, and a real round
trip."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys

import pytest

from xrmq.actors.edge.capture_file import MAGIC, encode_record, read_records, replay_offsets
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

from buses import broker_process, expect_line, reap

pytestmark = pytest.mark.timeout(60)

NOTES = context_topic("edge.capture.notes")
SCENE = context_topic("edge.capture.scene")


def test_records_round_trip_with_their_timestamps_and_frames():
    records = [
        (1_000, [b"k\x00p\x00", b"meta", b"payload"]),
        (2_500, [b"", b"x" * 70_000]),
        (2_400, []),
    ]
    data = MAGIC + b"".join(encode_record(ts, frames) for ts, frames in records)
    decoded = list(read_records(io.BytesIO(data)))
    assert [(r.timestamp_us, list(r.frames)) for r in decoded] == records


def test_a_bad_or_truncated_file_is_named_and_refused():
    with pytest.raises(ValueError, match="x.cap: not an xrmq capture file"):
        list(read_records(io.BytesIO(b"NOTXRMQ!"), name="x.cap"))
    whole = MAGIC + encode_record(1, [b"abc"]) + encode_record(2, [b"defgh"])
    for cut in (len(whole) - 1, len(whole) - 7, len(whole) - 15):
        with pytest.raises(ValueError, match="x.cap: record 1 is truncated"):
            list(read_records(io.BytesIO(whole[:cut]), name="x.cap"))


def test_replay_offsets_keep_relative_timing_scaled_by_speed():
    stamps = [5_000_000, 5_500_000, 7_000_000]
    assert replay_offsets(stamps, 1.0) == [0.0, 0.5, 2.0]
    assert replay_offsets(stamps, 4.0) == [0.0, 0.125, 0.5]
    assert replay_offsets(stamps, float("inf")) == [0.0, 0.0, 0.0]
    assert replay_offsets([10, 3_000_010, 1_000_010], 1.0) == [
        0.0,
        3.0,
        3.0,
    ]  # a clock step back keeps order
    with pytest.raises(ValueError, match="--speed: must be > 0"):
        replay_offsets(stamps, 0)


class Collector(Agent):
    def __init__(self, expected: int) -> None:
        self.seen: list[tuple[str, str | None, str, str]] = []
        self.expected = expected
        self.done = asyncio.Event()

    @subscribe(NOTES)
    @subscribe(SCENE)
    async def on_update(self, message: ConversationContextUpdate, ctx: RuntimeContext) -> None:
        self.seen.append(
            (ctx.topic.name, ctx.participant_id, message.text, ctx.metadata.message_id)
        )
        if len(self.seen) == self.expected:
            self.done.set()


async def test_record_then_replay_reproduces_the_same_messages_in_order(tmp_path):
    capture = tmp_path / "session.cap"
    with broker_process() as bus:
        recorder = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "xrmq.actors.cli",
                "record",
                str(capture),
                "--bus",
                bus,
                "--count",
                "6",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            expect_line(recorder, "xrmq record: ready")
            sent = []
            async with AgentRuntime(bus) as publisher:
                for index, (topic, participant) in enumerate(
                    [
                        (NOTES, "p1"),
                        (SCENE, "p2"),
                        (NOTES, "p2"),
                        (NOTES, None),
                        (SCENE, "p1"),
                        (NOTES, "p1"),
                    ]
                ):
                    text = f"update {index}"
                    message_id = publisher.send(
                        topic, ConversationContextUpdate(text), participant_id=participant
                    )
                    sent.append((topic.name, participant, text, message_id))
            assert (
                expect_line(recorder, "xrmq record: wrote")
                == f"xrmq record: wrote 6 messages to {capture}"
            )
            assert recorder.wait(timeout=10) == 0
        finally:
            reap(recorder)

        collector = Collector(len(sent))
        subscriber = AgentRuntime(bus)
        subscriber.register("collector", collector)
        async with subscriber:
            replayer = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "xrmq.actors.cli",
                "replay",
                str(capture),
                "--bus",
                bus,
                "--speed",
                "20",
                stdout=asyncio.subprocess.PIPE,
            )
            output, _ = await replayer.communicate()
            assert replayer.returncode == 0
            assert output.decode().strip() == f"xrmq replay: sent 6 of 6 messages from {capture}"
            await asyncio.wait_for(collector.done.wait(), 10)
            assert subscriber.metrics().gaps == 0
    assert collector.seen == sent
