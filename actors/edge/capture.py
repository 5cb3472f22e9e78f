"""``xrmq record`` and ``xrmq replay``: the broker's capture stream to a file and back onto a bus.

Neither command sleeps to beat ZeroMQ's slow joiner. The recorder publishes a probe
through the broker until it comes back on the capture socket, so its first recorded
message is the first one published after it printed ``xrmq record: ready``. The
replayer publishes a probe until it comes back through the broker's subscriber side,
so its connection to the broker is up before the first replayed message.

Only messages are recorded: readiness probes and the subscription frames that the
capture socket also carries are skipped.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import zmq

from xrmq.actors.runtime.address import check_ipc_directories, parse_bus
from xrmq.actors.runtime.broker import DEFAULT_MAX_MESSAGE_BYTES, shared_context
from xrmq.actors.runtime.security.keys import client_credentials
from xrmq.topics import split_key

from .recording import MAGIC, encode_record, read_records, replay_offsets
from .topicfilter import TopicFilter

_PROBE_TOPIC = b"xrmq.capture\x00\x00"


def _is_message(frames: list[bytes]) -> bool:
    if len(frames) != 3:
        return False
    try:
        return split_key(frames[0])[2] == b""
    except ValueError:
        return False


def _probe_until_seen(pub: zmq.Socket, sub: zmq.Socket, timeout: float, what: str) -> None:
    """Publish a probe on ``pub`` until ``sub`` receives it back; ``TimeoutError`` naming
    ``what``."""
    probe = _PROBE_TOPIC + b"?" + uuid.uuid4().hex.encode()
    deadline = time.monotonic() + timeout
    interval_ms = 5
    while time.monotonic() < deadline:
        pub.send_multipart((probe, b"", b""))
        if sub.poll(interval_ms):
            while sub.poll(0):
                if sub.recv_multipart()[0] == probe:
                    return
        interval_ms = min(interval_ms * 2, 200)
    raise TimeoutError(f"no broker answered {what} within {timeout:g}s")


def _secure(*sockets: zmq.Socket) -> None:
    """Make the sockets CURVE clients when ``$XRMQ_KEY``/``$XRMQ_SERVER_KEY`` say so
    (``--key``, ``--server-key``)."""
    credentials = client_credentials()
    if credentials is not None:
        for socket in sockets:
            credentials.apply(socket)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def _topic_of(frames: Sequence[bytes]) -> str:
    return split_key(frames[0])[0]


def record(
    bus: str,
    path: str,
    *,
    count: int | None,
    duration: float | None,
    out: TextIO,
    ready_timeout: float = 10.0,
    topics: TopicFilter = TopicFilter(),
) -> int:
    """Write the bus's capture stream to ``path`` until SIGINT/SIGTERM, ``count`` messages or
    ``duration`` seconds; only messages whose topic ``topics`` admits."""
    address = parse_bus(bus)
    check_ipc_directories(address)
    context = shared_context()
    sub = context.socket(zmq.SUB)
    pub = context.socket(zmq.PUB)
    written = 0
    _secure(sub, pub)
    try:
        sub.setsockopt(zmq.RCVHWM, 0)
        sub.setsockopt(zmq.MAXMSGSIZE, DEFAULT_MAX_MESSAGE_BYTES)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(address.capture)
        pub.connect(address.publish)
        _probe_until_seen(
            pub,
            sub,
            ready_timeout,
            f"on the capture socket {address.capture} (is capture enabled?)",
        )
        stop = _stop_on_signals()
        deadline = None if duration is None else time.monotonic() + duration
        with Path(path).open("wb") as file:
            file.write(MAGIC)
            print(f"xrmq record: ready {address.capture} -> {path}", file=out, flush=True)
            while not stop.is_set() and (count is None or written < count):
                if deadline is not None and time.monotonic() >= deadline:
                    break
                if not sub.poll(100):
                    continue
                frames = sub.recv_multipart()
                if _is_message(frames) and topics.admits(_topic_of(frames)):
                    file.write(encode_record(time.time_ns() // 1000, frames))
                    written += 1
    finally:
        sub.close(linger=0)
        pub.close(linger=0)
    print(f"xrmq record: wrote {written} messages to {path}", file=out, flush=True)
    return 0


def replay(
    bus: str,
    path: str,
    *,
    speed: float,
    out: TextIO,
    ready_timeout: float = 10.0,
    topics: TopicFilter = TopicFilter(),
) -> int:
    """Publish the messages of a capture file whose topic ``topics`` admits onto ``bus``, in
    order, at recorded pace divided by ``speed``."""
    with Path(path).open("rb") as file:
        every = list(read_records(file, name=path))
    records = [
        record_
        for record_ in every
        if _is_message(list(record_.frames)) and topics.admits(_topic_of(record_.frames))
    ]
    offsets = replay_offsets([record.timestamp_us for record in records], speed)
    address = parse_bus(bus)
    check_ipc_directories(address)
    context = shared_context()
    pub = context.socket(zmq.PUB)
    sub = context.socket(zmq.SUB)
    _secure(sub, pub)
    try:
        sub.setsockopt(zmq.MAXMSGSIZE, DEFAULT_MAX_MESSAGE_BYTES)
        pub.setsockopt(zmq.SNDHWM, 0)
        pub.connect(address.publish)
        sub.setsockopt(zmq.SUBSCRIBE, _PROBE_TOPIC)
        sub.connect(address.subscribe)
        _probe_until_seen(pub, sub, ready_timeout, f"at {address.publish}")
        stop = _stop_on_signals()
        start = time.monotonic()
        sent = 0
        for record_, offset in zip(records, offsets):
            if stop.wait(max(0.0, start + offset - time.monotonic())):
                break
            pub.send_multipart(record_.frames)
            sent += 1
    finally:
        sub.close(linger=0)
        pub.close(linger=5000)  # let the replayed messages reach the broker
    left_out = (
        f" ({len(every) - len(records)} left out by topic)" if len(every) > len(records) else ""
    )
    print(
        f"xrmq replay: sent {sent} of {len(records)} messages from {path}{left_out}",
        file=out,
        flush=True,
    )
    return 0
