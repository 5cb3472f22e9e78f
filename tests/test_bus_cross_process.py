"""Delivery across real OS processes through a real broker process."""

from __future__ import annotations

import json

import pytest

from buses import broker_process, expect_line, python, reap
from raw_client import RawClient

pytestmark = pytest.mark.timeout(90)


def test_ten_thousand_messages_arrive_complete_and_in_order_across_processes():
    with broker_process() as bus:
        subscriber = python("subscriber.py", bus, "load", "10000")
        publisher = None
        try:
            expect_line(subscriber, "ready")  # subscription live through the broker: no sleep
            publisher = python("publisher.py", bus, "load", "10000")
            expect_line(publisher, "published")
            report = json.loads(expect_line(subscriber, "{"))
        finally:
            reap(subscriber, *(p for p in [publisher] if p))
    assert report["count"] == 10_000
    assert report["texts"] == [f"m{i}" for i in range(10_000)]
    assert report["gaps"] == 0


def test_participant_filtered_subscriber_receives_only_that_participant():
    with broker_process() as bus:
        subscriber = python("subscriber.py", bus, "notes", "50", "p2")
        publisher = None
        try:
            expect_line(subscriber, "ready")
            publisher = python("publisher.py", bus, "notes", "150", "p1", "p2", "p3")
            expect_line(publisher, "published")
            report = json.loads(expect_line(subscriber, "{"))
        finally:
            reap(subscriber, *(p for p in [publisher] if p))
    assert report["participants"] == ["p2"]
    assert report["texts"] == [f"m{i}" for i in range(1, 150, 3)]
    assert report["gaps"] == 0


def test_two_processes_sharing_a_keyed_kind_own_disjoint_keys():
    import asyncio

    from xrmq.actors.runtime import AgentRuntime, shard_of
    from xrmq.schemas import ConversationContextUpdate
    from xrmq.topics import context_topic

    keys = [f"participant-{i}" for i in range(24)]
    with broker_process() as bus:
        shards = [
            python("keyed_shard.py", bus, str(i), "2", stdin=__import__("subprocess").PIPE)
            for i in range(2)
        ]
        try:
            for shard in shards:
                expect_line(shard, "ready")

            async def ask_all() -> list[int]:
                async with AgentRuntime(bus) as runtime:
                    topic = context_topic("keyed.probe")
                    return [
                        await runtime.ask(
                            topic,
                            ConversationContextUpdate("which shard?"),
                            participant_id=key,
                            reply_type=int,
                            timeout=10,
                        )
                        for key in keys
                    ]

            answered_by = asyncio.run(ask_all())
            spawned = []
            for shard in shards:
                shard.stdin.close()
                spawned.append(set(json.loads(expect_line(shard, "["))))
        finally:
            reap(*shards)
    assert answered_by == [shard_of(key, 2) for key in keys]
    assert spawned[0].isdisjoint(spawned[1])
    assert spawned[0] | spawned[1] == set(keys)
    assert all(shard_of(key, 2) == 0 for key in spawned[0])


def test_foreign_client_with_raw_pyzmq_and_msgpack_publishes_a_context_update():
    with broker_process() as bus:
        subscriber = python("subscriber.py", bus, "sample.notes", "1", "headset-7")
        client = RawClient(bus)
        try:
            expect_line(subscriber, "ready")
            client.wait_ready()
            client.send("sample.notes", "headset-7", 1, {"text": "Calibration moved to 15:30."})
            report = json.loads(expect_line(subscriber, "{"))
        finally:
            client.close()
            reap(subscriber)
    assert report["texts"] == ["Calibration moved to 15:30."]
    assert report["participants"] == ["headset-7"]


def test_malformed_and_wrong_schema_frames_are_dropped_and_counted_and_the_actor_goes_on():
    with broker_process() as bus:
        subscriber = python("subscriber.py", bus, "notes", "2")
        client = RawClient(bus)
        try:
            expect_line(subscriber, "ready")
            client.wait_ready()
            key = b"notes\x00\x00"
            client.send_frames([key])
            client.send_frames([key, b"only two frames"])
            client.send_frames([key, client.metadata(1, None), b"\x80", b"a fourth frame"])
            client.send_frames([key, b"\xc1 not msgpack", b"\x80"])
            # key lacks its second NUL
            client.send_frames([b"notes\x00", client.metadata(1, None), b"\x80"])
            client.send("notes", None, 1, {"text": "first good"})
            client.send("notes", None, 2, {"txt": 42})  # wrong schema
            client.send("notes", None, 3, {"text": "   "})  # fails validation: blank text
            client.send("notes", None, 4, {"text": "second good"})
            report = json.loads(expect_line(subscriber, "{"))
        finally:
            client.close()
            reap(subscriber)
    assert report["texts"] == ["first good", "second good"]
    # each bad message alone: a short one never swallows its neighbour
    assert report["rejected"] == 7
