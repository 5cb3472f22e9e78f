"""The broker repeats stopped runtimes' final heartbeats (``broker_report.TailReplay``):
bounded in runtimes held, in repeats and in keys per heartbeat, and every runtime dropped
unrepeated is counted."""

from __future__ import annotations

import msgspec

from xrmq.actors.runtime.broker_report import TailReplay
from xrmq.schemas import MessageMetadata, RuntimeMetrics

_encode = msgspec.msgpack.encode


def heartbeat(sender: str, last_seq: dict[str, int], *, final: bool = True, epoch: int = 7):
    metadata = MessageMetadata("id", sender, sender, epoch, 1, 1)
    metrics = RuntimeMetrics(
        runtime=sender,
        epoch=epoch,
        pid=1,
        timestamp_us=1,
        published=0,
        delivered=0,
        gaps=0,
        stale=0,
        rejected=0,
        overflow=0,
        handler_errors=0,
        last_seq=last_seq,
        final=final,
    )
    return _encode(metadata), _encode(metrics)


def test_a_final_heartbeat_is_repeated_for_its_repeats_then_forgotten():
    replay = TailReplay(repeats=3)
    replay.heartbeat(*heartbeat("sensor", {"k1": 5}))
    replay.heartbeat(*heartbeat("client", {"k2": 9}, final=False))  # alive: nothing to repeat
    replay.heartbeat(b"\xc1", b"not msgpack")  # refused by its receivers, ignored here
    beats = [[(t.sender, t.epoch, t.last_seq) for t in replay.due()] for _ in range(4)]
    assert beats == [[("sensor", 7, {"k1": 5})]] * 3 + [[]]
    assert len(replay) == 0 and replay.dropped == 0


def test_a_final_heartbeat_in_parts_is_merged_and_its_repeats_start_again():
    replay = TailReplay(repeats=2)
    replay.heartbeat(*heartbeat("sensor", {"k1": 5}))
    assert [t.last_seq for t in replay.due()] == [{"k1": 5}]
    replay.heartbeat(*heartbeat("sensor", {"k2": 3}))
    assert [t.last_seq for t in replay.due()] == [{"k1": 5, "k2": 3}]
    assert [t.last_seq for t in replay.due()] == [{"k1": 5, "k2": 3}]
    assert replay.due() == []


def test_the_runtimes_held_are_bounded_and_the_oldest_dropped_is_counted():
    replay = TailReplay(repeats=1, senders=2)
    for name in ("a", "b", "c"):
        replay.heartbeat(*heartbeat(name, {"k": 1}))
    assert [t.sender for t in replay.due()] == ["b", "c"]
    assert replay.dropped == 1


def test_one_heartbeat_repeats_at_most_its_key_budget_the_rest_in_the_next():
    replay = TailReplay(repeats=1, keys_per_beat=3)
    replay.heartbeat(*heartbeat("a", {"k1": 1, "k2": 1}))
    replay.heartbeat(*heartbeat("b", {"k1": 1, "k2": 1}))
    replay.heartbeat(*heartbeat("c", {"k1": 1, "k2": 1, "k3": 1, "k4": 1}))
    assert [t.sender for t in replay.due()] == ["a"]
    assert [t.sender for t in replay.due()] == ["b"]
    assert [t.last_seq for t in replay.due()] == [{"k2": 1, "k3": 1, "k4": 1}]  # its newest
    assert replay.due() == [] and replay.dropped == 0 and replay.keys_dropped == 1


def test_a_heartbeat_frame_that_does_not_decode_is_refused_counted_and_kept_nothing():
    """The fuzz suite's deeply nested MessagePack on xrmq.metrics raised RecursionError,
    which ended the broker's report thread, and the broker stopped answering."""
    replay = TailReplay()
    metadata, _ = heartbeat("sensor", {"k": 1})
    replay.heartbeat(metadata, b"\x91" * 100_000)  # an array in an array ... 100,000 deep
    replay.heartbeat(metadata, b"not msgpack")
    replay.heartbeat(b"", b"")
    assert replay.refused == 3 and len(replay) == 0 and replay.due() == []
