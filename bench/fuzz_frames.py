"""Adversarial bus frames, by category, from a raw pyzmq process (no xrmq import).

What an attacker or a fuzzer on the same bus can send: each category is one kind of
bad message (issue 13's list). ``frames(category, rng, topics)`` builds one message (a
list of frames) of a category; every key names a real topic (``topics``), so the frame
reaches the runtimes that subscribe to it instead of being filtered at the broker.
Run as a process (``python -m bench.fuzz_frames --bus ipc://... --count N``) it sends
N messages, a mix of every category, and prints ``fuzz: sent {...}`` (JSON counts per
category). Used by the ``fuzz`` bench suite and ``tests/test_fuzz_stack.py``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid

import msgspec
import zmq

CATEGORIES = (
    "random_parts",  # 1-5 frames of random bytes under a real topic's key
    "garbage_metadata",  # a valid key, metadata that is not a MessageMetadata
    "wrong_schema",  # a valid envelope, a payload of another schema
    "nested",  # deeply nested MessagePack, in the metadata or the payload
    "invalid_utf8",  # invalid UTF-8 in the key's participant or in metadata strings
    "participant_mismatch",  # metadata.participant_id differs from the key's
    "empty_participant",  # participant_id "" with a reply_to (the frame that killed actors)
    "bad_reply_to",  # a reply_to that is not an inbox topic
    "seq_range",  # seq 0, negative or beyond 2**53
    "epoch_range",  # an epoch from the future, or 2**63 under a real sender's name
    "oversize",  # a payload over the bus's maximum message size
)

DEFAULT_TOPICS = (
    "voice.query",
    "voice.output",
    "voice.interrupted",
    "participant.joined",
    "participant.left",
    "notes",
    "scene",
    "context.view",
    "context.dialogue.write",
    "context.dialogue.clear",
    "context.topic.notes.write",
    "context.worker.0.jobs",
    "context.worker.1.jobs",
    "route.conversation.aid",
    "route.conversation.aids",
    "route.conversation.turn",
    "route.conversation.signal",
    "xrmq.metrics",
)
"""Topics of the default edge box (``examples/edge-box.toml``)."""

OVERSIZE_BYTES = 8 * 1024 * 1024
_encode = msgspec.msgpack.encode


def _key(topic: str, participant: bytes) -> bytes:
    return topic.encode() + b"\x00" + participant + b"\x00"


def _metadata(
    rng: random.Random, sender: str, seq: int, participant: str | None, **extra: object
) -> dict:
    fields: dict[str, object] = {
        "message_id": uuid.UUID(int=rng.getrandbits(128)).hex,
        "source": "fuzz",
        "sender": sender,
        "epoch": time.time_ns() // 1000,
        "seq": seq,
        "timestamp_us": time.time_ns() // 1000,
    }
    if participant is not None:
        fields["participant_id"] = participant
    fields.update(extra)
    return fields


def _nested(depth: int) -> bytes:
    return b"\x81\xa4text" + b"\x91" * depth + b"\xc0"


def frames(
    category: str, rng: random.Random, topics: tuple[str, ...], sender: str, seq: int
) -> list[bytes]:
    """One message of ``category`` (see ``CATEGORIES``)."""
    topic = rng.choice(topics)
    pid = f"fz{rng.randrange(1000)}"
    key = _key(topic, pid.encode())
    good = _encode(_metadata(rng, sender, seq, pid))
    if category == "random_parts":
        parts = rng.randint(1, 5)
        return [key] + [rng.randbytes(rng.randrange(64)) for _ in range(parts - 1)]
    if category == "garbage_metadata":
        metadata = rng.choice(
            [
                rng.randbytes(rng.randrange(1, 64)),
                _encode([1, 2, 3]),
                _encode({"seq": "x"}),
                _encode(_metadata(rng, sender, seq, pid, message_id="")),
            ]
        )
        return [key, metadata, _encode({"text": "x"})]
    if category == "wrong_schema":
        payload = rng.choice(
            [
                _encode({"nope": 1}),
                _encode([1, "two"]),
                _encode({"text": 5, "kind": []}),
                rng.randbytes(16),
            ]
        )
        return [key, good, payload]
    if category == "nested":
        if rng.random() < 0.5:
            return [key, _nested(rng.choice([1000, 100_000])), _encode({"text": "x"})]
        return [key, good, _nested(rng.choice([1000, 100_000]))]
    if category == "invalid_utf8":
        if rng.random() < 0.5:
            return [_key(topic, b"\xff\xfe" + pid.encode()), good, _encode({"text": "x"})]
        bad = _encode(_metadata(rng, sender, seq, pid, source="FUZZ")).replace(
            b"\xa4FUZZ", b"\xa4\xff\xfe\xfd\xfc"
        )
        return [key, bad, _encode({"text": "x"})]
    if category == "participant_mismatch":
        return [key, _encode(_metadata(rng, sender, seq, pid + "-other")), _encode({"text": "x"})]
    if category == "empty_participant":
        return [
            _key(topic, b""),
            _encode(_metadata(rng, sender, seq, "", reply_to="_inbox.fuzz")),
            _encode({"text": "x"}),
        ]
    if category == "bad_reply_to":
        reply_to = rng.choice(["voice.output", "", "_inbox.", "notes"])
        return [
            key,
            _encode(_metadata(rng, sender, seq, pid, reply_to=reply_to)),
            _encode({"text": "x"}),
        ]
    if category == "seq_range":
        bad_seq = rng.choice([0, -1, 2**53 + 1, 2**63])
        return [key, _encode(_metadata(rng, sender, bad_seq, pid)), _encode({"text": "x"})]
    if category == "epoch_range":
        epoch = rng.choice([2**63, time.time_ns() // 1000 + 86_400_000_000, 2**62])
        return [
            key,
            _encode(
                _metadata(
                    rng, rng.choice([sender, "router", "conversation"]), seq, pid, epoch=epoch
                )
            ),
            _encode({"text": "x"}),
        ]
    if category == "oversize":
        return [
            key,
            good,
            b"\x81\xa4text\xdb" + OVERSIZE_BYTES.to_bytes(4, "big") + bytes(OVERSIZE_BYTES),
        ]
    raise ValueError(f"category: {category!r} is not one of {', '.join(CATEGORIES)}")


def wait_ready(pub: zmq.Socket, sub: zmq.Socket, sender: str, timeout: float = 10.0) -> None:
    """The readiness handshake of the protocol (README): a probe under a private key comes back."""
    private = f"_probe.{sender}".encode() + b"\x00"
    sub.setsockopt(zmq.SUBSCRIBE, private)
    probe = private + b"\x00?" + uuid.uuid4().hex.encode()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pub.send_multipart([probe, b"", b""])
        if sub.poll(50) and sub.recv_multipart()[0] == probe:
            return
    raise TimeoutError("fuzz: the broker did not answer the probe")


def send(
    bus: str,
    count: int,
    *,
    seed: int = 13,
    topics: tuple[str, ...] = DEFAULT_TOPICS,
    categories: tuple[str, ...] = CATEGORIES,
    oversize: int = 1,
) -> dict[str, int]:
    """Send ``count`` messages through the broker of the ipc bus ``bus``, round-robin over
    ``categories`` (at most ``oversize`` oversize ones: each drops the connection); return
    how many of each were sent."""
    prefix = bus.removeprefix("ipc://")
    context = zmq.Context()
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.connect(f"ipc://{prefix}.in")
    sub = context.socket(zmq.SUB)
    sub.connect(f"ipc://{prefix}.out")
    sender = f"fuzz-{uuid.uuid4().hex[:8]}"
    rng = random.Random(seed)
    sent = dict.fromkeys(categories, 0)
    try:
        wait_ready(pub, sub, sender)
        for index in range(count):
            category = categories[index % len(categories)]
            if category == "oversize" and sent["oversize"] >= oversize:
                continue
            pub.send_multipart(frames(category, rng, topics, sender, index + 1))
            sent[category] += 1
            if category == "oversize":  # the broker drops this connection: handshake again
                wait_ready(pub, sub, sender)
            elif index % 256 == 255:
                time.sleep(0.001)  # a flood, but not one that only measures the HWM
        wait_ready(pub, sub, sender)  # everything sent before the last probe went through
    finally:
        pub.close(linger=2000)
        sub.close(linger=0)
        context.term()
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bus", required=True, help="ipc:///path/prefix of the bus")
    parser.add_argument("--count", type=int, default=len(CATEGORIES) * 20)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--topics", default=",".join(DEFAULT_TOPICS))
    args = parser.parse_args(argv)
    sent = send(args.bus, args.count, seed=args.seed, topics=tuple(args.topics.split(",")))
    print("fuzz: sent " + json.dumps(sent), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
