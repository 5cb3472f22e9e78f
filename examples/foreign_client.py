"""A client in any language: publish a context update with pyzmq and MessagePack only.

python examples/foreign_client.py [BUS] [PARTICIPANT] [TEXT] [SPEECH.wav]

With a WAV (16 kHz mono PCM16), it also sends it as microphone audio: AudioFrame maps
on "audio.in", 20 ms (640 bytes) per frame, paced in real time, as a headset would.

No xrmq import: this is what a C#, C++ or Rust client does, following
docs/protocol.md. Every message is three frames [key, metadata, payload]; the key is
"<topic> NUL <participant> NUL". A ZeroMQ connection drops what is sent before it is
up, so the client first publishes a probe under a private key until it comes back.

On a CURVE bus set XRMQ_KEY (this client's NAME.key_secret) and XRMQ_SERVER_KEY (the
broker's public key file): the sockets become CURVE clients, and the sender name starts
with NAME, the identity the broker knows the key by.
"""

import os
import sys
import time
import uuid
import wave
from pathlib import Path

import msgspec
import zmq
import zmq.auth


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


def send_audio(pub, sender: str, participant: str, path: str) -> int:
    """Publish a 16 kHz mono PCM16 WAV as 20 ms AudioFrames on audio.in; return the count."""
    with wave.open(path, "rb") as reader:
        if (reader.getframerate(), reader.getnchannels(), reader.getsampwidth()) != (16000, 1, 2):
            sys.exit(
                "foreign client: the WAV must be 16 kHz mono 16-bit (sox in.wav -r 16000 -c 1 "
                "out.wav)"
            )
        pcm = reader.readframes(reader.getnframes())
    key = b"audio.in\x00" + participant.encode() + b"\x00"
    epoch, start, count = time.time_ns() // 1000, time.monotonic(), 0
    for offset in range(0, len(pcm), 640):
        chunk = pcm[offset : offset + 640].ljust(640, b"\x00")
        # real time, like a microphone
        time.sleep(max(0.0, start + count * 0.02 - time.monotonic()))
        metadata = {
            "message_id": uuid.uuid4().hex,
            "source": "foreign-client",
            "sender": sender,
            "epoch": epoch,
            "seq": count + 1,
            "timestamp_us": time.time_ns() // 1000,
            "participant_id": participant,
        }
        frame = {
            "pcm": chunk,
            "sample_rate": 16000,
            "channels": 1,
            "frame": count,
            "timestamp_us": epoch + count * 20_000,
        }
        pub.send_multipart([key, msgspec.msgpack.encode(metadata), msgspec.msgpack.encode(frame)])
        count += 1
    return count


def main(bus: str, participant: str, text: str, speech: str | None = None) -> None:
    publish, subscribe = endpoints(bus)
    context = zmq.Context()
    pub, sub = context.socket(zmq.PUB), context.socket(zmq.SUB)
    identity = "foreign"
    if os.environ.get("XRMQ_KEY"):
        public, secret = zmq.auth.load_certificate(os.environ["XRMQ_KEY"])
        server, _ = zmq.auth.load_certificate(os.environ["XRMQ_SERVER_KEY"])
        for sock in (pub, sub):
            sock.curve_publickey, sock.curve_secretkey = public, secret
            sock.curve_serverkey = server
        identity = Path(os.environ["XRMQ_KEY"]).name.removesuffix(".key_secret")
    pub.connect(publish)
    sub.connect(subscribe)
    sender = f"{identity}-{uuid.uuid4().hex[:8]}"

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
    if speech is not None:
        frames = send_audio(pub, sender, participant, speech)
        print(f"foreign client: sent {frames} audio frames for {participant}", flush=True)
    pub.close(linger=2000)  # let the message leave before the process exits
    sub.close(linger=0)
    context.term()
    print(f"foreign client: published notes for {participant}: {text}", flush=True)


args = sys.argv[1:] + [None] * 4
main(
    args[0] or os.environ.get("XRMQ_BUS", "default"),
    args[1] or "p1",
    args[2] or "The lab 3 fridge holds the reagent kit R-88.",
    args[3],
)
