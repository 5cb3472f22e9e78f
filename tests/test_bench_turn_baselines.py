"""The turn suite's instruments (issue 23): the tap counts only in its pass, and the paced raw
baselines answer every participant.

Real processes through a real broker: the tap (``bench.turn_tap``) and the raw ring
(``bench.turn_ring``) run as the suite runs them (``bench.procs.Worker``); the test plays
the turn path's publishers with raw pyzmq, and waits for what it published to come back to
a subscriber of its own, so the broker has forwarded it before the tap is asked.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import msgspec
import pytest

from xrmq.schemas import MessageMetadata, ResponseOutput, UserQuery
from xrmq.topics import QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from bench.bus_workers import Envelopes, raw_sockets, send_frames
from bench.procs import Worker
from buses import broker_process

ENCODE = msgspec.msgpack.Encoder().encode
PARTICIPANT = b"p1"  # Envelopes' participant
TURN_PATH = (
    QUERY_TOPIC.name.encode(),
    b"route.conversation.turn",
    b"_inbox.bench-router",
    VOICE_OUTPUT_TOPIC.name.encode(),
)


class TurnPath:
    """Publishes one turn's crossings (the query, the request, its reply, the first chunk) and
    waits until the broker has forwarded them all (they come back to its own subscriber)."""

    def __init__(self, bus: str) -> None:
        self.pub, self.sub = raw_sockets(bus, *(topic + b"\x00" for topic in TURN_PATH))
        self.envelopes = Envelopes("bench-client")

    def turn(self) -> None:
        query_metadata = self.envelopes.next()
        turn_id = msgspec.msgpack.decode(query_metadata, type=MessageMetadata).message_id
        chunk = ResponseOutput(kind="reply", text="Room 4B.", request_id=turn_id)
        messages = [
            (QUERY_TOPIC.name.encode(), query_metadata, ENCODE(UserQuery("Where?", 1))),
            (b"route.conversation.turn", self.envelopes.next(), b"turn"),
            (b"_inbox.bench-router", self.envelopes.next(), b"outcome"),
            (VOICE_OUTPUT_TOPIC.name.encode(), self.envelopes.next(), ENCODE(chunk)),
        ]
        for topic, metadata, payload in messages:
            send_frames(self.pub, [topic + b"\x00" + PARTICIPANT + b"\x00", metadata, payload])
        for _ in messages:
            assert self.sub.poll(10_000), "the broker did not forward the turn"
            self.sub.recv_multipart()

    def close(self) -> None:
        self.pub.close()
        self.sub.close()


@pytest.fixture
def bus() -> Iterator[str]:
    with broker_process() as bus:
        yield bus


def worker(stack: ExitStack, name: str, *argv: str) -> Worker:
    started = Worker(name, *argv)
    stack.callback(started.close)
    started.expect("ready")
    return started


def test_the_tap_counts_the_turns_of_its_pass_and_reads_nothing_outside_it(bus: str) -> None:
    with ExitStack() as stack:
        tap = worker(stack, "tap", "-m", "bench.turn_tap", bus)
        path = TurnPath(bus)
        stack.callback(path.close)

        path.turn()  # before the pass: not subscribed, never sent to the tap
        tap.command("start")
        tap.expect("counting")
        path.turn()
        path.turn()
        tap.command("counts")
        counted = tap.result()
        path.turn()  # after the pass: unsubscribed again
        tap.command("start")
        tap.expect("counting")
        tap.command("counts")
        after = tap.result()

    assert counted["crossings"] == [4, 4]
    assert counted["by_topic"] == {topic.decode(): 2 for topic in TURN_PATH}
    assert counted["outside"] == 0
    assert after == {"crossings": [], "by_topic": {}, "outside": 0}


def test_the_paced_raw_ring_and_round_trip_time_every_participants_every_message(
    bus: str,
) -> None:
    with ExitStack() as stack:
        for hop in ("router", "conversation"):
            worker(stack, f"ring-{hop}", "-m", "bench.turn_ring", "hop", bus, hop)
        client = worker(stack, "ring-client", "-m", "bench.turn_ring", "client", bus)
        client.command("ring 3 p0,p1,p2 1")
        ring = client.result()
        client.command("ping 2 p0,p1 1")
        ping = client.result()

    assert ring["failed"] == 0 and len(ring["rtt_us"]) == 9
    assert ping["failed"] == 0 and len(ping["rtt_us"]) == 4
    assert all(rtt > 0 for rtt in ring["rtt_us"] + ping["rtt_us"])


def test_the_ring_hops_answer_each_participant_on_its_own_key(bus: str) -> None:
    with ExitStack() as stack:
        worker(stack, "ring-router", "-m", "bench.turn_ring", "hop", bus, "router")
        worker(stack, "ring-conversation", "-m", "bench.turn_ring", "hop", bus, "conversation")
        pub, sub = raw_sockets(bus, b"ring.")
        stack.callback(sub.close)
        stack.callback(pub.close)
        for participant in (b"a", b"b"):
            send_frames(pub, [b"ring.query\x00" + participant + b"\x00", b"m", b"q"])
        seen: list[tuple[bytes, int, int]] = []
        while len(seen) < 6:  # each query, its turn, its output
            assert sub.poll(10_000), f"the ring stopped after {seen}"
            frames = sub.recv_multipart()
            seen.append((frames[0], len(frames[1]), len(frames[2])))
    assert sorted(seen) == sorted(
        (topic + participant + b"\x00", *sizes)
        for participant in (b"a", b"b")
        for topic, sizes in (
            (b"ring.query\x00", (1, 1)),
            (b"ring.turn\x00", (220, 800)),
            (b"ring.output\x00", (207, 134)),
        )
    )
