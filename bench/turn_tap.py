"""Broker crossings per turn, counted by a passive tap on the broker's output (issue 23).

``python -m bench.turn_tap BUS`` subscribes (raw pyzmq) to every topic of the turn path:
the query topic, every ``route.*`` topic (the remote destination's requests, signals
and events), every ``_inbox.*`` topic (the replies to asks) and the reply topic. Each
message the broker forwards there is one broker crossing. For each turn (a
``UserQuery`` on the query topic; its metadata ``message_id`` is the turn id) it counts
the crossings of that participant from the query, included, to the turn's first
nonblank reply fragment, included: what a turn pays in the runtime before the
renderer can speak. Not counted, as not part of the turn's way to its first chunk:
another turn's reply fragments, and the end events (``done``/``failed``/``cancelled``)
of a previous call that arrive late. ``counts`` prints ``{"crossings": [per turn],
"by_topic": {topic: crossings}}`` for the turns completed since the last ``counts``.

Why a separate process: it reads what every subscriber of the broker reads, in the
broker's order, without taking CPU from the processes whose latency is measured.
"""

from __future__ import annotations

import json
import re
import sys
import threading
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
                return
            if _EVENTS.match(name) and _EVENT.decode(payload).kind in _ENDS:
                return
            counts[topic_label(name.decode(errors="replace"))] += 1

    def take(self) -> dict:
        with self.lock:
            record = {"crossings": self.done, "by_topic": dict(self.by_topic)}
            self.done, self.by_topic = [], Counter()
            return record


def main(bus: str) -> None:
    _, sub = raw_sockets(bus, _QUERY + b"\x00", b"route.", b"_inbox.", _OUTPUT_NAME + b"\x00")
    tally = Tally()

    def read() -> None:
        while True:
            try:
                tally.observe(sub.recv_multipart())
            except zmq.ZMQError:
                return

    threading.Thread(target=read, name="tap", daemon=True).start()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.split() == ["counts"]:
            print(json.dumps(tally.take()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
