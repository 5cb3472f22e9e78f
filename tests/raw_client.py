"""A bus client written against the documented frame layout only (raw pyzmq + MessagePack).

It does not import xrmq: it is what a C#, C++ or Rust client would do. Used to prove
the protocol is usable from other languages and to inject malformed frames and losses.
"""

from __future__ import annotations

import time
import uuid

import msgspec
import zmq


class RawClient:
    def __init__(self, bus: str) -> None:
        prefix = bus[len("ipc://") :]
        self.context = zmq.Context()
        self.pub = self.context.socket(zmq.PUB)
        self.pub.connect(f"ipc://{prefix}.in")
        self.sub = self.context.socket(zmq.SUB)
        self.sub.connect(f"ipc://{prefix}.out")
        self.sender = f"raw-{uuid.uuid4().hex[:8]}"
        self.epoch = time.time_ns() // 1000

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Readiness handshake: publish a probe under a private key until it comes back."""
        private = f"_probe.{self.sender}".encode() + b"\x00"
        self.sub.setsockopt(zmq.SUBSCRIBE, private)
        probe = private + b"\x00?" + uuid.uuid4().hex.encode()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pub.send_multipart([probe, b"", b""])
            if self.sub.poll(50):
                if self.sub.recv_multipart()[0] == probe:
                    return
        raise TimeoutError("raw client: broker did not answer the probe")

    def metadata(self, seq: int, participant: str | None, **extra) -> bytes:
        fields = {
            "message_id": uuid.uuid4().hex,
            "source": "foreign",
            "sender": self.sender,
            "epoch": self.epoch,
            "seq": seq,
            "timestamp_us": time.time_ns() // 1000,
            "participant_id": participant,
            **extra,
        }
        return msgspec.msgpack.encode(fields)

    def send(self, topic: str, participant: str | None, seq: int, payload: dict) -> None:
        key = topic.encode() + b"\x00" + (participant or "").encode() + b"\x00"
        self.pub.send_multipart(
            [key, self.metadata(seq, participant), msgspec.msgpack.encode(payload)]
        )

    def send_frames(self, frames: list[bytes]) -> None:
        self.pub.send_multipart(frames)

    def close(self) -> None:
        self.pub.close(linger=2000)
        self.sub.close(linger=0)
        self.context.term()
