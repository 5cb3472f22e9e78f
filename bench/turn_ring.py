"""Raw pyzmq baselines shaped like a turn and paced like one (the turn suite, issue 23).

The turn suite's back-to-back raw round trip (``bench.bus_workers``' ping-pong) is the
bars' baseline, but a turn is neither back to back nor two crossings: each participant
thinks between turns, so every process on the path has gone idle when a query comes,
and the query crosses the broker three times in series before its first chunk (client
-> router, the ``RouteTurn`` router -> conversation, the chunk conversation -> client).
On a VM an idle process costs a wake-up per hop. These raw processes pay exactly that,
with none of the runtime's work, through the same broker:

- ``python -m bench.turn_ring hop BUS router``: receives ``ring.query`` and publishes a
  ``ring.turn`` (turn-sized frames); receives ``ring.ping`` and answers ``ring.pong``.
- ``python -m bench.turn_ring hop BUS conversation``: receives ``ring.turn`` and
  publishes a ``ring.output`` (chunk-sized frames).
- ``python -m bench.turn_ring client BUS``: the timer. ``ring N P1,P2,.. PAUSE_MS``
  sends N ``ring.query`` per participant, all participants at once, each after a pause
  drawn uniformly from [0, 2 x PAUSE_MS] (the turn client's think time), and times each
  until its ``ring.output`` comes back: the 3-hop ring, the turn's floor.
  ``ping N P1,.. PAUSE_MS`` does the same over ``ring.ping`` / ``ring.pong``: the 2-hop
  raw round trip, paced. Both print ``{"rtt_us": [...], "failed": n}`` (a reply not back
  within ``REPLY_TIMEOUT_S`` is failed, and the participant goes on).

Frames are what the turn's messages weigh (key, metadata, payload as measured on the
turn path, route protocol 2; the ``RouteTurn`` payload grows with the participant's
history, 600-1,000 bytes over a run); the ping is the bus suite's raw ping-pong frames.
The hops are blocking raw pyzmq (``bus_workers``' socket calls), so they wait in
``epoll`` as an idle actor runtime does. Every participant's key carries its id, so
the hops answer each participant on its own key and the client matches replies to
participants.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time

import zmq

from .bus_workers import (
    ANSWER,
    ENCODE,
    QUERY,
    Envelopes,
    raw_sockets,
    recv_frames,
    send_frames,
)

REPLY_TIMEOUT_S = 10.0

QUERY_TOPIC = b"ring.query\x00"
TURN_TOPIC = b"ring.turn\x00"
OUTPUT_TOPIC = b"ring.output\x00"
PING_TOPIC = b"ring.ping\x00"
PONG_TOPIC = b"ring.pong\x00"

_PING_METADATA = Envelopes("bench-ring-client").next("_inbox.bench-ring-client")
FRAMES: dict[bytes, tuple[bytes, bytes]] = {
    # topic: (metadata, payload), sized like the turn path's messages
    QUERY_TOPIC: (b"m" * 184, b"q" * 44),  # UserQuery
    TURN_TOPIC: (b"m" * 220, b"t" * 800),  # RouteTurn: the turn with its history
    OUTPUT_TOPIC: (b"m" * 207, b"o" * 134),  # the first ResponseOutput fragment
    PING_TOPIC: (_PING_METADATA, ENCODE(QUERY)),  # the bus suite's raw ping
    PONG_TOPIC: (_PING_METADATA, ENCODE(ANSWER)),
}
HOPS: dict[str, dict[bytes, bytes]] = {
    # hop: {topic received: topic published}
    "router": {QUERY_TOPIC: TURN_TOPIC, PING_TOPIC: PONG_TOPIC},
    "conversation": {TURN_TOPIC: OUTPUT_TOPIC},
}
LOOPS: dict[str, tuple[bytes, bytes]] = {
    "ring": (QUERY_TOPIC, OUTPUT_TOPIC),
    "ping": (PING_TOPIC, PONG_TOPIC),
}
"""Client command: (topic sent, topic whose return closes the round trip)."""


def frames(topic: bytes, participant: bytes) -> list[bytes]:
    """One message on ``topic`` for ``participant``: key, metadata, payload."""
    metadata, payload = FRAMES[topic]
    return [topic + participant + b"\x00", metadata, payload]


def hop(bus: str, name: str) -> None:
    routes = HOPS[name]
    pub, sub = raw_sockets(bus, *routes)
    replies: dict[bytes, dict[bytes, list[bytes]]] = {topic: {} for topic in routes}
    print("ready", flush=True)
    while True:
        key = recv_frames(sub)
        topic, _, rest = key.partition(b"\x00")
        topic += b"\x00"
        participant = rest.rstrip(b"\x00")
        built = replies[topic]  # per participant, built at its first message
        reply = built.get(participant)
        if reply is None:
            reply = built[participant] = frames(routes[topic], participant)
        send_frames(pub, reply)


def client(bus: str) -> None:
    pub, sub = raw_sockets(bus, OUTPUT_TOPIC, PONG_TOPIC)
    print("ready", flush=True)
    while command := sys.stdin.readline().split():
        sent, back = LOOPS[command[0]]
        count, participants, pause_ms = int(command[1]), command[2].split(","), float(command[3])
        rtts, failed = paced(pub, sub, sent, back, count, participants, pause_ms / 1000)
        print(json.dumps({"rtt_us": rtts, "failed": failed}), flush=True)


def paced(
    pub: zmq.Socket,
    sub: zmq.Socket,
    sent: bytes,
    back: bytes,
    count: int,
    participants: list[str],
    pause_s: float,
) -> tuple[list[float], int]:
    """``count`` round trips per participant, participants at once, each after a think
    time uniform in [0, 2 x ``pause_s``]; the round trips in us and the number failed."""
    messages = {p.encode(): frames(sent, p.encode()) for p in participants}
    keys = {back + p + b"\x00": p for p in messages}
    left = dict.fromkeys(messages, count)
    now = time.perf_counter()
    due = {p: now + random.uniform(0, 2 * pause_s) for p in messages}
    waiting: dict[bytes, int] = {}  # participant: perf_counter_ns when sent
    rtts: list[float] = []
    failed = 0

    def next_turn(participant: bytes) -> None:
        left[participant] -= 1
        if left[participant]:
            due[participant] = time.perf_counter() + random.uniform(0, 2 * pause_s)

    while due or waiting:
        now = time.perf_counter()
        for participant, at in list(due.items()):
            if at <= now:
                del due[participant]
                waiting[participant] = time.perf_counter_ns()
                send_frames(pub, messages[participant])
        for participant, began in list(waiting.items()):
            if time.perf_counter_ns() - began > REPLY_TIMEOUT_S * 1e9:
                del waiting[participant]
                failed += 1
                next_turn(participant)
        now = time.perf_counter()
        wait_s = min((at - now for at in due.values()), default=REPLY_TIMEOUT_S)
        # rounded up, as asyncio's epoll timeout is: no spinning before a pause ends
        if not sub.poll(max(0, math.ceil(wait_s * 1000))):
            continue
        key = recv_frames(sub)
        arrived = time.perf_counter_ns()
        replied = keys.get(key)
        if replied is None or replied not in waiting:
            continue  # another command's late reply
        rtts.append((arrived - waiting.pop(replied)) / 1000)
        next_turn(replied)
    return rtts, failed


if __name__ == "__main__":
    if sys.argv[1] == "hop":
        hop(sys.argv[2], sys.argv[3])
    else:
        client(sys.argv[2])
