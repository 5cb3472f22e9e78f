"""Seeing what is on the bus: ``xrmq echo``, ``xrmq topics``, ``xrmq capture show``.

- ``echo TOPIC [--participant P] [--json]`` prints every message of one topic as it
  arrives: a standard topic decoded with its schema (defaults filled in: a final frame
  shows ``"final": true``), any other topic's MessagePack payload as it is, and a
  payload that is not MessagePack as hex.
- ``topics [--window S] [--all] [--topic GLOB] [--participant P]`` reads the broker's
  capture stream for a while and prints, per topic seen, its messages, rate, publishers
  (sender runtimes) and participants, and its
  live subscriptions from the broker's heartbeat (``RuntimeMetrics.subscriptions``, which
  crosses the capture stream too); a topic subscribed to but silent is listed with 0
  messages.
- ``capture show FILE [--json] [--all] [--topic GLOB] [--participant P]`` prints a
  recording made by ``xrmq record``.

What ``topics`` and ``capture show`` print: a box's bus carries mostly
its own traffic (heartbeats, the router's calls, the context actors' sections, ask
replies), dozens of topics beside the few a user publishes or reads. They hide the
internal ones (``xrmq.topics.is_internal``: the rule is written once, there) unless
``--all``, and always say how many they hid (``+41 internal topics hidden: --all shows
them``; ``capture show`` says it on stderr, so ``--json`` stays one object a line), so an
empty answer never reads as an empty bus. ``--topic GLOB`` (fnmatch, repeatable or a comma
list) and ``--participant P`` narrow further; the hidden count is of what they admitted.

Every payload prints, whatever it holds: a bytes value (an exchange's
``identity``, an audio frame's ``pcm``) reads ``<N bytes: 0a1b...>`` in text (its length
and a hex prefix: enough to tell values apart, not a screenful of audio) and is base64 in
``--json`` (lossless, and what ``msgspec`` decodes back into a ``bytes`` field); a
MessagePack timestamp is ISO 8601 and any other extension type ``{"ext": code, "data": ...}``.

The decoding (``describe``) is pure; the commands do the socket I/O, with the same
readiness probe as ``record``.
"""

from __future__ import annotations

import base64
import json
import signal
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, TextIO

import msgspec
import zmq

from xrmq.actors.runtime.address import parse_bus
from xrmq.actors.runtime.broker import shared_context
from xrmq.actors.runtime.security.keys import client_credentials
from xrmq.actors.runtime.subscriptions import topic_of
from xrmq.schemas import MessageMetadata, RuntimeMetrics
from xrmq.topics import METRICS_TOPIC, STANDARD_TOPICS, is_internal, split_key

from .capture_file import read_records

CAPTURE_PROBE = b"xrmq.capture"
_STANDARD = {topic.name: topic for topic in STANDARD_TOPICS}
_metadata = msgspec.msgpack.Decoder(MessageMetadata)
_broker_metrics = msgspec.msgpack.Decoder(RuntimeMetrics)
BROKER_NAME = "broker"
BYTES_PREFIX = 16
"""How many leading bytes of a bytes value the text output shows, in hex."""


@dataclass(frozen=True)
class TopicView:
    """Which topics and messages ``topics`` and ``capture show`` print: those matching one of
    ``patterns`` (any when empty) and of ``participant`` (any when None), internal topics
    only with ``everything`` (``--all``)."""

    patterns: tuple[str, ...] = ()
    participant: str | None = None
    everything: bool = False

    def selects(self, topic: str) -> bool:
        """Whether ``topic`` matches ``--topic`` (internal or not)."""
        return not self.patterns or any(fnmatchcase(topic, pattern) for pattern in self.patterns)

    def hides(self, topic: str) -> bool:
        """Whether ``topic`` is left out for being internal."""
        return not self.everything and is_internal(topic)


def hidden_note(topics: int, messages: int | None = None) -> str:
    """``+N internal topics hidden: --all shows them`` (with the messages they carried)."""
    plural = "" if topics == 1 else "s"
    carried = "" if messages is None else f"{messages} message{'' if messages == 1 else 's'} on "
    return f"+{carried}{topics} internal topic{plural} hidden: --all shows them"


def _every_field(message: msgspec.Struct) -> dict[str, Any]:
    """A decoded message's fields, those at their default included (the wire leaves them out);
    bytes stay bytes, for the output to render."""
    return {
        name: msgspec.to_builtins(getattr(message, name), builtin_types=(bytes, datetime))
        for name in message.__struct_fields__
    }


def _bytes_text(value: bytes) -> str:
    more = "..." if len(value) > BYTES_PREFIX else ""
    return f"<{len(value)} bytes: {value[:BYTES_PREFIX].hex()}{more}>"


def _jsonable(value: Any) -> Any:
    """``value`` with what JSON cannot hold made JSON: bytes base64, a timestamp ISO 8601, an
    extension type ``{"ext", "data"}``."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, msgspec.msgpack.Ext):
        return {"ext": value.code, "data": _jsonable(value.data)}
    if isinstance(value, dict):
        return {
            _jsonable(key) if isinstance(key, bytes | datetime) else key: _jsonable(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


def _text(value: Any) -> str:
    """``value`` as JSON reads, but bytes as ``<N bytes: hex...>`` (unquoted: not a string)."""
    if isinstance(value, bytes):
        return _bytes_text(value)
    if isinstance(value, msgspec.msgpack.Ext):
        return f'{{"ext": {value.code}, "data": {_text(value.data)}}}'
    if isinstance(value, dict):
        items = (
            f"{_text(key) if isinstance(key, bytes) else _text(str(_jsonable(key)))}: {_text(item)}"
            for key, item in value.items()
        )
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_text(item) for item in value) + "]"
    return json.dumps(_jsonable(value), ensure_ascii=False)


def describe(frames: Sequence[bytes]) -> dict[str, Any] | None:
    """One message as a JSON-ready dict (topic, participant, source, message_id,
    timestamp_us, payload), or None for a control frame or a malformed message."""
    if len(frames) != 3:
        return None
    try:
        topic, participant, control = split_key(frames[0])
    except (ValueError, UnicodeDecodeError):
        return None
    if control:
        return None
    try:
        metadata = _metadata.decode(frames[1])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    payload: Any
    known = _STANDARD.get(topic)
    try:
        payload = (
            _every_field(known.decode(frames[2]))
            if known is not None
            else msgspec.msgpack.decode(frames[2])
        )
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        payload = {"raw": frames[2].hex()}
    return {
        "topic": topic,
        "participant": participant,
        "source": metadata.source,
        "message_id": metadata.message_id,
        "timestamp_us": metadata.timestamp_us,
        "payload": payload,
    }


def _line(message: dict[str, Any], as_json: bool) -> str:
    if as_json:
        return json.dumps(_jsonable(message), ensure_ascii=False)
    when = datetime.fromtimestamp(message["timestamp_us"] / 1e6, UTC).strftime("%H:%M:%S.%f")[:-3]
    who = f"[{message['participant']}]" if message["participant"] else "[-]"
    return f"{when} {message['topic']} {who} {message['source']}: {_text(message['payload'])}"


def _stop_event() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def _connect(
    bus: str, *, capture: bool, prefixes: Sequence[bytes], ready_timeout: float
) -> tuple[zmq.Socket, zmq.Socket]:
    """A SUB on the subscribe (or capture) endpoint, ready: a probe published through the
    broker came back on it. On a CURVE bus (``$XRMQ_KEY``) both sockets are CURVE clients
    and the probe is one the identity may make: the capture probe (which needs ``capture``),
    else a private probe of a runtime name of its own."""
    address = parse_bus(bus)
    credentials = client_credentials()
    context = shared_context()
    sub, pub = context.socket(zmq.SUB), context.socket(zmq.PUB)
    if credentials is not None:
        credentials.apply(sub)
        credentials.apply(pub)
    owner = credentials.identity if credentials is not None else "xrmq-tools"
    topic = CAPTURE_PROBE if capture else f"_probe.{owner}-{uuid.uuid4().hex[:12]}".encode()
    probe_key = topic + b"\x00\x00"
    sub.setsockopt(zmq.RCVHWM, 0)
    for prefix in prefixes:
        sub.setsockopt(zmq.SUBSCRIBE, prefix)
    sub.setsockopt(zmq.SUBSCRIBE, probe_key)
    sub.connect(address.capture if capture else address.subscribe)
    pub.connect(address.publish)
    probe = probe_key + b"?" + uuid.uuid4().hex.encode()
    deadline = time.monotonic() + ready_timeout
    try:
        while True:
            pub.send_multipart((probe, b"", b""))
            if sub.poll(50) and sub.recv_multipart()[0] == probe:
                return sub, pub
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no broker answered at {bus} within {ready_timeout:g}s (is `xrmq up` running?"
                    + (
                        " may this identity read the capture socket?)"
                        if capture and credentials
                        else ")"
                    )
                )
    except BaseException:
        sub.close(linger=0)
        pub.close(linger=0)
        raise


def echo(
    bus: str,
    topic: str,
    *,
    participant: str | None,
    as_json: bool,
    out: TextIO,
    count: int | None = None,
    ready_timeout: float = 10.0,
) -> int:
    """Print ``topic``'s messages (only ``participant``'s with one) until a signal or ``count``."""
    prefix = topic.encode() + b"\x00" + (participant.encode() + b"\x00" if participant else b"")
    sub, pub = _connect(bus, capture=False, prefixes=[prefix], ready_timeout=ready_timeout)
    printed = 0
    try:
        stop = _stop_event()
        print(
            f"xrmq echo: ready topic={topic} participant={participant or '*'}", file=out, flush=True
        )
        while not stop.is_set() and (count is None or printed < count):
            if not sub.poll(100):
                continue
            message = describe(sub.recv_multipart())
            if message is not None and message["topic"] == topic:
                print(_line(message, as_json), file=out, flush=True)
                printed += 1
    finally:
        sub.close(linger=0)
        pub.close(linger=0)
    return 0


def topics(
    bus: str,
    *,
    window: float,
    out: TextIO,
    view: TopicView = TopicView(),
    ready_timeout: float = 10.0,
) -> int:
    """Watch the capture stream for ``window`` seconds and print what each topic ``view``
    shows carried, with its live subscriptions from the broker's last report in that time."""
    sub, pub = _connect(bus, capture=True, prefixes=[b""], ready_timeout=ready_timeout)
    seen: dict[str, dict[str, Any]] = {}
    subscriptions: dict[str, int] | None = None
    try:
        stop = _stop_event()
        print(f"xrmq topics: ready, watching {bus} for {window:g}s", file=out, flush=True)
        began = time.monotonic()
        while not stop.is_set() and time.monotonic() - began < window:
            if not sub.poll(50):
                continue
            frames = sub.recv_multipart()
            message = describe(frames)
            if message is None:
                continue
            metadata = _metadata.decode(frames[1])
            if message["topic"] == METRICS_TOPIC.name and metadata.sender == BROKER_NAME:
                subscriptions = _broker_metrics.decode(frames[2]).subscriptions
            if view.participant is not None and message["participant"] != view.participant:
                continue
            stats = seen.setdefault(
                message["topic"], {"messages": 0, "senders": set(), "participants": set()}
            )
            stats["messages"] += 1
            stats["senders"].add(metadata.sender)
            if message["participant"]:
                stats["participants"].add(message["participant"])
        elapsed = max(time.monotonic() - began, 1e-9)
    finally:
        sub.close(linger=0)
        pub.close(linger=0)
    print(topics_table(seen, subscriptions, elapsed, view), file=out, flush=True)
    return 0


def topics_table(
    seen: dict[str, dict[str, Any]],
    subscriptions: dict[str, int] | None,
    elapsed: float,
    view: TopicView = TopicView(),
) -> str:
    """The table of ``xrmq topics``: every topic ``view`` shows that was seen (or, without
    ``--participant``, subscribed to), one line each, and how many internal ones it hid."""
    subscribed = subscriptions or {} if view.participant is None else {}
    listed = {*seen, *subscribed}
    selected = [name for name in sorted(listed) if view.selects(name)]
    names = [name for name in selected if not view.hides(name)]
    hidden = len(selected) - len(names)
    lines = [
        f"{'TOPIC':40} {'MSGS':>7} {'MSG/S':>8} {'PUBLISHERS':>10} {'PARTICIPANTS':>12} "
        f"{'SUBSCRIBERS':>11}"
    ]
    for name in names:
        stats = seen.get(name, {"messages": 0, "senders": (), "participants": ()})
        subscribers = (
            "?"
            if subscriptions is None
            else str(subscriptions.get(topic_of(name.encode() + b"\x00"), 0))
        )
        lines.append(
            f"{name:40} {stats['messages']:>7} {stats['messages'] / elapsed:>8.1f} "
            f"{len(stats['senders']):>10} {len(stats['participants']):>12} {subscribers:>11}"
        )
    counted = (
        "subscribers: live subscriptions at the broker"
        if subscriptions is not None
        else "subscribers: no broker report in the window (`xrmq bus` reports them with "
        "--metrics-interval, as under `xrmq up`)"
    )
    whose = "" if view.participant is None else f", participant {view.participant}'s messages"
    lines.append(f"{len(names)} topics in {elapsed:.1f}s ({counted}{whose})")
    if hidden:
        lines.append(hidden_note(hidden))
    return "\n".join(lines)


def show(
    path: str, *, as_json: bool, out: TextIO, err: TextIO, view: TopicView = TopicView()
) -> int:
    """Print every message of the recording at ``path`` that ``view`` shows; say on ``err``
    how many internal ones it hid."""
    hidden: dict[str, int] = {}
    with Path(path).open("rb") as file:
        for record in read_records(file, name=path):
            message = describe(record.frames)
            if message is None or not view.selects(message["topic"]):
                continue
            if view.participant is not None and message["participant"] != view.participant:
                continue
            if view.hides(message["topic"]):
                hidden[message["topic"]] = hidden.get(message["topic"], 0) + 1
                continue
            print(_line(message, as_json), file=out)
    out.flush()
    if hidden:
        print(f"xrmq capture show: {hidden_note(len(hidden), sum(hidden.values()))}", file=err)
    return 0
