"""Broker crossings per turn, counted by a tap on the broker's output (issue 23).

``python -m bench.turn_tap BUS`` counts, in a counting pass only, every message the broker
forwards on the turn path: the query topic, every ``route.*`` topic (the remote
destination's requests, signals and events), every ``_inbox.*`` topic (the replies to
asks) and the reply topic (raw pyzmq). Each such message is one broker crossing. For each
turn (a ``UserQuery`` on the query topic; its metadata ``message_id`` is the turn id) it
counts the crossings of that participant from the query, included, to the turn's first
nonblank reply fragment, included: what a turn pays in the runtime before the renderer
can speak. Not counted, as not part of the turn's way to its first chunk: another turn's
reply fragments, and the end events (``done``/``failed``/``cancelled``) of a previous
call that arrive late.

Commands: ``start`` subscribes to those topics and prints ``counting`` once the broker
applies the subscriptions; ``counts`` reads everything the broker forwarded until then,
unsubscribes, and prints ``{"crossings": [per turn], "by_topic": {topic: crossings},
"outside": n}`` for the turns completed in the pass (``outside``: turn-path messages read
between passes, 0 unless an unsubscription was still in flight).

Why a separate process: it reads what every subscriber of the broker reads, in the
broker's order, without instrumenting the processes whose latency is measured. Why only
in a pass: subscribed, it is one more subscriber the broker copies every turn message to,
and a process woken per message on the cores the timed turns share (1.3 ms of CPU per
turn, of about 10 ms for the whole path, on the 2-core box), so timed turns run without it.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
import time
import uuid
from collections import Counter

import msgspec
import zmq

from xrmq.schemas import MessageMetadata, ResponseOutput
from xrmq.schemas.routing import RouteEvent
from xrmq.topics import QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from .bus_workers import raw_sockets

_METADATA = msgspec.msgpack.Decoder(MessageMetadata)
_OUTPUT = msgspec.msgpack.Decoder(ResponseOutput)
_EVENT = msgspec.msgpack.Decoder(RouteEvent)
_QUERY = QUERY_TOPIC.name.encode()
_OUTPUT_NAME = VOICE_OUTPUT_TOPIC.name.encode()
_EVENTS = re.compile(rb"^route\.[^\x00]*\.events\.")
_ENDS = ("done", "failed", "cancelled")


def topic_label(name: str) -> str:
    """A topic name with its per-proxy / per-runtime part folded (``route.X.events.*``)."""
    return re.sub(r"\.events\.[0-9a-f]+$", ".events.*", name)


class Tally:
    """Per participant, the crossings of its open turn; closed turns' counts."""

    def __init__(self) -> None:
        self.open: dict[str, tuple[str, Counter[str]]] = {}
        self.done: list[int] = []
        self.by_topic: Counter[str] = Counter()
        self.lock = threading.Lock()
        self._closed = threading.Condition(self.lock)

    def observe(self, frames: list[bytes]) -> None:
        if len(frames) != 3:
            return
        key, meta, payload = frames
        name, _, rest = key.partition(b"\x00")
        if not rest or rest.count(b"\x00") != 1 or not rest.endswith(b"\x00"):
            return  # a control frame (probe)
        metadata = _METADATA.decode(meta)
        pid = metadata.participant_id
        if pid is None:
            return
        with self.lock:
            if name == _QUERY:
                self.open[pid] = (metadata.message_id, Counter({QUERY_TOPIC.name: 1}))
                return
            turn = self.open.get(pid)
            if turn is None:
                return
            turn_id, counts = turn
            if name == _OUTPUT_NAME:
                output = _OUTPUT.decode(payload)
                if output.request_id != turn_id:
                    return
                counts[VOICE_OUTPUT_TOPIC.name] += 1
                if output.text.strip():
                    del self.open[pid]
                    self.done.append(sum(counts.values()))
                    self.by_topic.update(counts)
                    self._closed.notify_all()
                return
            if _EVENTS.match(name) and _EVENT.decode(payload).kind in _ENDS:
                return
            counts[topic_label(name.decode(errors="replace"))] += 1

    def wait_done(self, turns: int, timeout: float) -> bool:
        """Block until ``turns`` turns closed (from another thread than the reader's);
        False if ``timeout`` seconds passed first."""
        with self._closed:
            return self._closed.wait_for(lambda: len(self.done) >= turns, timeout)

    def take(self) -> dict:
        with self.lock:
            record = {"crossings": self.done, "by_topic": dict(self.by_topic)}
            self.done, self.by_topic = [], Counter()
            return record


TOPICS = (_QUERY + b"\x00", b"route.", b"_inbox.", _OUTPUT_NAME + b"\x00")
"""The turn path's topics (subscription prefixes): subscribed only while counting."""


class Tap:
    """The tap's socket and state, on one thread: stdin and the SUB share one poller."""

    def __init__(self, bus: str) -> None:
        self.pub, self.sub = raw_sockets(bus)
        self.tally = Tally()
        self.counting = False
        self.outside = 0
        """Turn-path messages read while not counting (an unsubscription still in flight)."""

    def read(self) -> bytes:
        """Read one message: counted while counting; its key."""
        frames = self.sub.recv_multipart()
        if self.counting:
            self.tally.observe(frames)
        elif not frames[0].startswith(b"_probe."):
            self.outside += 1
        return frames[0]

    def barrier(self, subscribe: bool = False) -> None:
        """Return once the broker has applied this socket's subscriptions (with
        ``subscribe``) and this socket has read every message the broker forwarded to it
        before now: a fresh probe prefix, subscribed after the others (a SUB's
        subscriptions reach the broker in order), is published until one comes back."""
        prefix = f"_probe.{uuid.uuid4().hex}\x00".encode()
        self.sub.setsockopt(zmq.SUBSCRIBE, prefix)
        probe = prefix + b"\x00?"
        try:
            while True:
                self.pub.send_multipart([probe, b"", b""])
                deadline = time.monotonic() + 0.02
                while (left := deadline - time.monotonic()) > 0 and self.sub.poll(
                    math.ceil(left * 1000)
                ):
                    if self.read() == probe:
                        return
        finally:
            self.sub.setsockopt(zmq.UNSUBSCRIBE, prefix)

    def start(self) -> None:
        """Subscribe to the turn path; counting from the first message of a turn that
        the broker forwards after this returns."""
        self.tally.take()  # nothing from before
        self.counting = True
        for topic in TOPICS:
            self.sub.setsockopt(zmq.SUBSCRIBE, topic)
        self.barrier()

    def stop(self) -> dict:
        """Read what the broker forwarded until now, unsubscribe; the counts."""
        self.barrier()
        self.counting = False
        for topic in TOPICS:
            self.sub.setsockopt(zmq.UNSUBSCRIBE, topic)
        record = self.tally.take()
        record["outside"], self.outside = self.outside, 0
        return record


def main(bus: str) -> None:
    tap = Tap(bus)
    stdin = sys.stdin.fileno()
    poller = zmq.Poller()
    poller.register(tap.sub, zmq.POLLIN)
    poller.register(stdin, zmq.POLLIN)
    print("ready", flush=True)
    pending = b""
    while True:
        for ready, _ in poller.poll():
            if ready is tap.sub:
                tap.read()
                continue
            data = os.read(stdin, 4096)
            if not data:
                return  # stdin closed: the deployment is closing
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                if line.split() == [b"start"]:
                    tap.start()
                    print("counting", flush=True)
                elif line.split() == [b"counts"]:
                    print(json.dumps(tap.stop()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
