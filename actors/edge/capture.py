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

import msgspec
import zmq

from xrmq.actors.runtime.address import check_ipc_directories, parse_bus
from xrmq.actors.runtime.broker import DEFAULT_MAX_MESSAGE_BYTES, shared_context
from xrmq.actors.runtime.security.acl import AS_PARTICIPANT, AccessPolicy, Permissions
from xrmq.actors.runtime.security.keys import client_credentials
from xrmq.schemas import MessageMetadata
from xrmq.topics import split_key

from .capture_file import MAGIC, encode_record, read_records, replay_offsets
from .topicfilter import TopicFilter

_PROBE_TOPIC = b"xrmq.capture\x00\x00"
_metadata = msgspec.msgpack.Decoder(MessageMetadata)
_encoder = msgspec.msgpack.Encoder()


def _is_message(frames: list[bytes]) -> bool:
    if len(frames) != 3:
        return False
    try:
        return split_key(frames[0])[2] == b""
    except ValueError:
        return False


def _probe_until_seen(
    pub: zmq.Socket, sub: zmq.Socket, timeout: float, what: str, topic: bytes = _PROBE_TOPIC
) -> None:
    """Publish a probe on ``pub`` until ``sub`` receives it back; ``TimeoutError`` naming
    ``what``."""
    probe = topic + b"?" + uuid.uuid4().hex.encode()
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


class Resourcer:
    """Re-sources recorded messages as one runtime of the replaying identity.

    Why: on a CURVE bus the broker drops a message whose ``sender`` is not a runtime of
    the identity that publishes it, and a recording carries the names of the runtimes that
    made it. A replay onto a secure bus is therefore published as the replayer's own
    runtime ``<identity>-replay-<id>`` (new epoch, ``seq`` from 1 per stream, new
    ``message_id``s, so a replayed query is a new turn), with its ``correlation_id`` and
    ``parent_message_id`` mapped to the new ids and a ``reply_to`` made its own inbox. The
    topic, participant, ``source`` and payload are kept: what the identity may publish is
    decided by its permissions, as for anything else it sends.
    """

    def __init__(self, identity: str) -> None:
        self.sender = f"{identity}-replay-{uuid.uuid4().hex[:8]}"
        self.epoch = time.time_ns() // 1000
        self._seqs: dict[bytes, int] = {}
        self._ids: dict[str, str] = {}

    def __call__(self, frames: Sequence[bytes]) -> tuple[bytes, bytes, bytes]:
        key, metadata_frame, payload = frames
        old = _metadata.decode(metadata_frame)
        seq = self._seqs[key] = self._seqs.get(key, 0) + 1
        message_id = self._ids.setdefault(old.message_id, uuid.uuid4().hex)
        metadata = msgspec.structs.replace(
            old,
            message_id=message_id,
            sender=self.sender,
            epoch=self.epoch,
            seq=seq,
            timestamp_us=time.time_ns() // 1000,
            correlation_id=None
            if old.correlation_id is None
            else self._ids.setdefault(old.correlation_id, uuid.uuid4().hex),
            parent_message_id=None
            if old.parent_message_id is None
            else self._ids.setdefault(old.parent_message_id, uuid.uuid4().hex),
            reply_to=None if old.reply_to is None else f"_inbox.{self.sender}",
        )
        return key, _encoder.encode(metadata), payload


def refused_by(
    permissions: Permissions, identity: str, messages: Sequence[Sequence[bytes]]
) -> dict[tuple[str, str], str]:
    """What the broker would drop of these (re-sourced) messages: (topic, source) -> the rule."""
    policy = AccessPolicy({identity: permissions})
    refused: dict[tuple[str, str], str] = {}
    for key, metadata, _ in messages:
        reason = policy.check_message(identity, key, metadata, False)
        if reason is not None:
            refused.setdefault((_topic_of((key,)), _metadata.decode(metadata).source), reason)
    return refused


def replay(
    bus: str,
    path: str,
    *,
    speed: float,
    out: TextIO,
    ready_timeout: float = 10.0,
    topics: TopicFilter = TopicFilter(),
    permissions: Permissions | None = None,
) -> int:
    """Publish the messages of a capture file whose topic ``topics`` admits onto ``bus``, in
    order, at recorded pace divided by ``speed``.

    On a CURVE bus (``$XRMQ_KEY``) the messages are re-sourced as the replaying identity
    (``Resourcer``); with its ``permissions`` known (``--config``), a replay holding a
    message the broker would drop is refused before anything is sent (``ValueError``
    naming each topic, source and rule), rather than half-played.
    """
    with Path(path).open("rb") as file:
        every = list(read_records(file, name=path))
    records = [
        record_
        for record_ in every
        if _is_message(list(record_.frames)) and topics.admits(_topic_of(record_.frames))
    ]
    offsets = replay_offsets([record.timestamp_us for record in records], speed)
    credentials = client_credentials()
    messages: list[Sequence[bytes]] = [record_.frames for record_ in records]
    resourced = ""
    probe_topic = _PROBE_TOPIC
    if credentials is not None:
        resource = Resourcer(credentials.identity)
        messages = [resource(frames) for frames in messages]
        resourced = f" as {resource.sender}"
        probe_topic = f"_probe.{resource.sender}".encode() + b"\x00\x00"  # its own to make
        if permissions is not None:
            refused = refused_by(permissions, credentials.identity, messages)
            if refused:
                rules = "; ".join(
                    f"{topic} (source {source!r}): {reason}"
                    for (topic, source), reason in sorted(refused.items())
                )
                keys = "publish/sources"
                if any(reason.startswith(AS_PARTICIPANT) for reason in refused.values()):
                    keys += "/participants"  # the identity is bound to other participants
                raise ValueError(
                    f"{path}: identity {credentials.identity!r} may not replay it onto this "
                    f"CURVE bus: {rules} (grant it in [bus.identities.{credentials.identity}] "
                    f"{keys}, or leave those topics out with --exclude)"
                )
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
        sub.setsockopt(zmq.SUBSCRIBE, probe_topic)
        sub.connect(address.subscribe)
        _probe_until_seen(pub, sub, ready_timeout, f"at {address.publish}", probe_topic)
        stop = _stop_on_signals()
        start = time.monotonic()
        sent = 0
        for frames, offset in zip(messages, offsets):
            if stop.wait(max(0.0, start + offset - time.monotonic())):
                break
            pub.send_multipart(frames)
            sent += 1
    finally:
        sub.close(linger=0)
        pub.close(linger=5000)  # let the replayed messages reach the broker
    left_out = (
        f" ({len(every) - len(records)} left out by topic)" if len(every) > len(records) else ""
    )
    print(
        f"xrmq replay: sent {sent} of {len(records)} messages from {path}{left_out}{resourced}",
        file=out,
        flush=True,
    )
    return 0
