"""A client in any language: publish a context update with pyzmq and MessagePack only.

python examples/foreign_client.py [BUS] [PARTICIPANT] [TEXT]

No xrmq import: this is what a C#, C++ or Rust client does, following the README's
protocol section. Every message is three frames [key, metadata, payload]; the key is
"<topic> NUL <participant> NUL". A ZeroMQ connection drops what is sent before it is
up, so the client first publishes a probe under a private key until it comes back.
"""

import os
import sys
import time
import uuid
from pathlib import Path

import msgspec
import zmq


def endpoints(bus: str) -> tuple[str, str]:
    """(publish, subscribe) endpoints of a bus: a name, ipc://PREFIX or tcp://HOST:PORT."""
    if bus.startswith("tcp://"):
        host, _, port = bus[len("tcp://") :].rpartition(":")
        return f"tcp://{host}:{port}", f"tcp://{host}:{int(port) + 1}"
    if bus.startswith("ipc://"):
        prefix = bus[len("ipc://") :]
    else:  # a bus name: sockets in the per-user runtime directory
        directory = os.environ.get("XRMQ_RUNTIME_DIR") or (
            Path(os.environ["XDG_RUNTIME_DIR"]) / "xrmq"
            if os.environ.get("XDG_RUNTIME_DIR")
            else f"/tmp/xrmq-{os.getuid()}"
        )
        prefix = f"{directory}/{bus}"
    return f"ipc://{prefix}.in", f"ipc://{prefix}.out"


def main(bus: str, participant: str, text: str) -> None:
    publish, subscribe = endpoints(bus)
    context = zmq.Context()
    pub, sub = context.socket(zmq.PUB), context.socket(zmq.SUB)
    pub.connect(publish)
    sub.connect(subscribe)
    sender = f"foreign-{uuid.uuid4().hex[:8]}"

    # Readiness: publish a probe under a private key until the broker hands it back.
    private = f"_probe.{sender}".encode() + b"\x00"
    sub.setsockopt(zmq.SUBSCRIBE, private)
    probe = private + b"\x00?" + uuid.uuid4().hex.encode()
    deadline = time.monotonic() + 10
    while not (sub.poll(50) and sub.recv_multipart()[0] == probe):
        if time.monotonic() > deadline:
            sys.exit(f"foreign client: no broker answered at {subscribe}")
        pub.send_multipart([probe, b"", b""])

    key = b"notes\x00" + participant.encode() + b"\x00"
    metadata = {
        "message_id": uuid.uuid4().hex,
        "source": "foreign-client",
        "sender": sender,
        "epoch": time.time_ns() // 1000,
        "seq": 1,
        "timestamp_us": time.time_ns() // 1000,
        "participant_id": participant,
    }
    pub.send_multipart(
        [key, msgspec.msgpack.encode(metadata), msgspec.msgpack.encode({"text": text})]
    )
    pub.close(linger=2000)  # let the message leave before the process exits
    sub.close(linger=0)
    context.term()
    print(f"foreign client: published notes for {participant}: {text}", flush=True)


args = sys.argv[1:] + [None] * 3
main(
    args[0] or os.environ.get("XRMQ_BUS", "default"),
    args[1] or "p1",
    args[2] or "The lab 3 fridge holds the reagent kit R-88.",
)
