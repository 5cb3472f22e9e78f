"""Processes of the bus suite: xrmq and raw pyzmq senders and receivers.

``python -m bench.bus_workers ROLE BUS COUNT``, ROLE one of ``xrmq-receiver``,
``xrmq-sender``, ``raw-receiver``, ``raw-sender``. Both implementations move the same
bytes through the same broker: the same wire key length, the same metadata frame and
the same MessagePack payload (a ``ResponseOutput`` stream fragment one way; a
``UserQuery`` asked and a ``ResponseOutput`` reply for the round trip). xrmq and raw
use topics whose names differ in one letter, so neither receiver sees the other's
traffic.

The raw side is the limit: blocking pyzmq, frames encoded once, no decoding, no
per-message bookkeeping, and the same socket calls xrmq makes: per frame, integer
flags, pyzmq's Cython ``send`` without its Python wrapper, ``recv(copy=False)`` with
every frame's "more" flag checked and only the key copied (pyzmq's
``send_multipart``/``recv_multipart`` convert flag enums per frame and cost about three
times as much). Receivers print ``ready`` once their subscriptions are live
through the broker, then one JSON line per batch of COUNT one-way messages:
``{"received", "first_ns", "last_ns", ...}`` (``time.monotonic_ns``, comparable
across processes). A batch that stalls for a second is reported with what arrived,
so a loss shows up as ``received < COUNT`` instead of a hang. Senders take
``send`` (prints ``{"start_ns", "end_ns"}``) and ``ask N`` (prints ``{"rtt_us": [...]}``);
the xrmq sender also takes ``fanout shared|private``: COUNT fragments to the fan-out
receiver's two actors, on a deeply immutable type or on a mutable copy of it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from typing import Any

import msgspec
import zmq

from xrmq.actors.runtime import Agent, AgentRuntime, Handlers, run, subscribe
from xrmq.actors.runtime._compat import frame_send
from xrmq.schemas import MessageMetadata, ResponseOutput, UserQuery
from xrmq.topics import Topic

PARTICIPANT = "p1"
FRAGMENT = ResponseOutput(
    kind="reply",
    text="The meeting room is on the fourth floor, next to ",
    request_id="turn-0042",
    response_id="resp-0042",
    final=False,
)
QUERY = UserQuery(
    text="Which room did Alice book for the review?", timestamp_us=1_767_000_000_000_000
)
ANSWER = ResponseOutput(kind="reply", text="Room 4B, at half past three.", request_id="turn-0042")
IDLE_MS = 1000

XRMQ_FRAGMENT = Topic("bench.fragment.x", ResponseOutput)
XRMQ_PING = Topic("bench.ping.x", UserQuery)

# Local fan-out: two actors of one process on one topic. ResponseOutput is deeply
# immutable, so both share one decoded message; MutableOutput has the same fields and
# validation (the same payload bytes, the same decode) but is not frozen, so each
# actor gets its own decode.
MutableOutput = msgspec.defstruct(
    "MutableOutput",
    [
        (field.encode_name, field.type, field.default)
        for field in msgspec.structs.fields(ResponseOutput)
    ],
    omit_defaults=True,
    namespace={name: ResponseOutput.__dict__[name] for name in ("__post_init__", "_explain")},
)
FANOUT: dict[str, tuple[Topic[Any], msgspec.Struct]] = {
    "shared": (Topic("bench.fanout.shared", ResponseOutput), FRAGMENT),
    "private": (
        Topic("bench.fanout.private", MutableOutput),
        msgspec.convert(msgspec.to_builtins(FRAGMENT), MutableOutput),
    ),
}
FANOUT_ACTORS = 2
RAW_FRAGMENT_KEY = b"bench.fragment.r\x00p1\x00"
RAW_PING_KEY = b"bench.ping.r\x00p1\x00"
RAW_REPLY_KEY = b"_inbox.bench-raw-sender\x00p1\x00"
CODEC_FRAGMENT_KEY = b"bench.fragment.c\x00p1\x00"
CODEC_PING_KEY = b"bench.ping.c\x00p1\x00"
CODEC_REPLY_KEY = b"_inbox.bench-codec-sender\x00p1\x00"


ENCODE = msgspec.msgpack.Encoder().encode


class Envelopes:
    """Fresh metadata frames, numbered like the runtime's: what any client of the protocol builds
    (the raw side sends its first one with every message)."""

    def __init__(self, sender: str) -> None:
        self.sender = sender
        self.epoch = time.time_ns() // 1000
        self.prefix = f"{sender}:{self.epoch:x}:"
        self.count = 0

    def next(self, reply_to: str | None = None) -> bytes:
        self.count += 1
        message_id = "%s%x" % (self.prefix, self.count)  # noqa: UP031  (as the runtime)
        return ENCODE(
            MessageMetadata(
                message_id,
                "application",
                self.sender,
                self.epoch,
                self.count,
                time.time_ns() // 1000,
                message_id,
                None,
                PARTICIPANT,
                reply_to,
            )
        )


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


class Batches:
    """Counts one-way messages and closes a batch every ``size`` of them."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.count = 0
        self.first_ns = 0
        self.last_ns = 0

    def arrived(self) -> bool:
        """Count one message; True when it completes the batch."""
        self.count += 1
        if self.count == 1:
            self.first_ns = time.monotonic_ns()
        if self.count == self.size:
            self.last_ns = time.monotonic_ns()
            return True
        return False

    def close(self, **extra: int) -> None:
        """Report the batch (a partial one after a stall) and start the next."""
        last = (
            self.last_ns if self.count == self.size else time.monotonic_ns() - IDLE_MS * 1_000_000
        )
        emit({"received": self.count, "first_ns": self.first_ns, "last_ns": last, **extra})
        self.count = 0


# ---------------------------------------------------------------- xrmq


class Counter(Agent):
    def __init__(self, batches: Batches) -> None:
        self.batches = batches
        self.full = asyncio.Event()

    @subscribe(XRMQ_FRAGMENT)
    async def on_fragment(self, message: ResponseOutput, ctx) -> None:
        if self.batches.arrived():
            self.full.set()


class FanoutCounter(Agent):
    """One of the fan-out actors: its topic comes from the constructor."""

    def __init__(self, topic: Topic, batches: Batches, full: asyncio.Event) -> None:
        self.topic, self.batches, self.full = topic, batches, full

    def handlers(self) -> Handlers:
        return {self.topic: self.on_fragment}

    async def on_fragment(self, message: ResponseOutput | MutableOutput, ctx) -> None:  # type: ignore[valid-type]  # defstruct
        if self.batches.arrived():
            self.full.set()


class Pong(Agent):
    @subscribe(XRMQ_PING)
    async def on_ping(self, message: UserQuery, ctx) -> ResponseOutput:
        return ANSWER


async def xrmq_receiver(bus: str, count: int) -> None:
    batches = Batches(count)
    counter = Counter(batches)
    runtime = AgentRuntime(bus, name="bench-xrmq-receiver")
    runtime.register("counter", counter)
    runtime.register("pong", Pong())
    async with runtime:
        print("ready", flush=True)
        seen = 0
        while True:
            try:
                await asyncio.wait_for(counter.full.wait(), IDLE_MS / 1000)
            except TimeoutError:
                if batches.count == 0 or batches.count != seen:
                    seen = batches.count
                    continue
            counter.full.clear()
            stats = runtime.metrics()
            batches.close(gaps=stats.gaps, overflow=stats.overflow, rejected=stats.rejected)
            seen = 0


async def xrmq_fanout_receiver(bus: str, count: int) -> None:
    """FANOUT_ACTORS actors on each fan-out topic; a batch is COUNT messages (each handled by
    every actor), reported as the kinds alternate (the sender sends one kind at a time)."""
    batches = Batches(count * FANOUT_ACTORS)
    full = asyncio.Event()
    # Mailboxes hold a whole batch: a burst faster than two actors take it is queued, not
    # refused (a refusal would be counted as loss, and the batch would stall).
    runtime = AgentRuntime(bus, name="bench-xrmq-fanout-receiver", mailbox_capacity=count)
    for kind, (topic, _) in FANOUT.items():
        for i in range(FANOUT_ACTORS):
            runtime.register(f"{kind}-{i}", FanoutCounter(topic, batches, full))
    async with runtime:
        print("ready", flush=True)
        seen = 0
        while True:
            try:
                await asyncio.wait_for(full.wait(), IDLE_MS / 1000)
            except TimeoutError:
                if batches.count == 0 or batches.count != seen:  # idle, or still arriving
                    seen = batches.count
                    continue
            full.clear()
            stats = runtime.metrics()
            batches.close(gaps=stats.gaps, overflow=stats.overflow)
            seen = 0


async def xrmq_sender(bus: str, count: int) -> None:
    loop = asyncio.get_running_loop()
    async with AgentRuntime(bus, name="bench-xrmq-sender") as runtime:
        print("ready", flush=True)
        while command := (await loop.run_in_executor(None, sys.stdin.readline)).split():
            if command[0] == "send":
                start = time.monotonic_ns()
                # send: publish without the coroutine, for loops (0.14 us less)
                for _ in range(count):
                    runtime.send(XRMQ_FRAGMENT, FRAGMENT, participant_id=PARTICIPANT)
                emit({"start_ns": start, "end_ns": time.monotonic_ns()})
            elif command[0] == "fanout":
                topic, message = FANOUT[command[1]]
                start = time.monotonic_ns()
                for _ in range(count):
                    runtime.send(topic, message, participant_id=PARTICIPANT)
                emit({"start_ns": start, "end_ns": time.monotonic_ns()})
            elif command[0] == "ask":
                rtts = []
                for _ in range(int(command[1])):
                    began = time.perf_counter_ns()
                    await runtime.ask(
                        XRMQ_PING, QUERY, reply_type=ResponseOutput, participant_id=PARTICIPANT
                    )
                    rtts.append((time.perf_counter_ns() - began) / 1000)
                emit({"rtt_us": rtts})


# ---------------------------------------------------------------- raw pyzmq


def raw_sockets(bus: str, *subscriptions: bytes) -> tuple[zmq.Socket, zmq.Socket]:
    """A PUB to the broker and a SUB from it, live through the broker when returned."""
    prefix = bus[len("ipc://") :]
    context: zmq.Context = zmq.Context.instance()
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 1_000_000)
    pub.connect(f"ipc://{prefix}.in")
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 1_000_000)
    sub.connect(f"ipc://{prefix}.out")
    probe_prefix = f"_probe.{uuid.uuid4().hex}\x00".encode()
    # in order: the probe's return proves the others
    for subscription in (*subscriptions, probe_prefix):
        sub.setsockopt(zmq.SUBSCRIBE, subscription)
    probe = probe_prefix + b"\x00?"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pub.send_multipart([probe, b"", b""])
        if sub.poll(20) and sub.recv_multipart()[0] == probe:
            while sub.poll(50):  # drain the other probes still in flight
                sub.recv_multipart()
            return pub, sub
    raise TimeoutError("raw: the broker did not answer the probe")


SNDMORE = int(zmq.SNDMORE)
FRAME_SEND = frame_send  # what the runtime calls: pyzmq's Cython send, without its Python wrapper


def send_frames(pub: zmq.Socket, frames: list[bytes]) -> None:
    FRAME_SEND(pub, frames[0], SNDMORE)
    FRAME_SEND(pub, frames[1], SNDMORE)
    FRAME_SEND(pub, frames[2])


def recv_frames(sub: zmq.Socket) -> bytes:
    """Receive one message, checking every frame's "more" flag as the runtime does; its key."""
    frame = sub.recv(copy=False)
    key = frame.bytes
    while frame.more:
        frame = sub.recv(copy=False)
    return key


def raw_receiver(bus: str, count: int) -> None:
    pub, sub = raw_sockets(bus, RAW_FRAGMENT_KEY, RAW_PING_KEY)
    sub.setsockopt(zmq.RCVTIMEO, IDLE_MS)
    reply = [RAW_REPLY_KEY, Envelopes("bench-raw-receiver").next(), ENCODE(ANSWER)]
    batches = Batches(count)
    print("ready", flush=True)
    while True:
        try:
            key = recv_frames(sub)
        except zmq.Again:
            if batches.count:
                batches.close()
            continue
        if key == RAW_PING_KEY:
            send_frames(pub, reply)
        elif batches.arrived():
            batches.close()


def raw_sender(bus: str, count: int) -> None:
    pub, sub = raw_sockets(bus, RAW_REPLY_KEY)
    envelopes = Envelopes("bench-raw-sender")
    fragment = [RAW_FRAGMENT_KEY, envelopes.next(), ENCODE(FRAGMENT)]
    ping = [RAW_PING_KEY, envelopes.next("_inbox.bench-raw-sender"), ENCODE(QUERY)]
    print("ready", flush=True)
    while command := sys.stdin.readline().split():
        if command[0] == "send":
            start = time.monotonic_ns()
            for _ in range(count):
                send_frames(pub, fragment)
            emit({"start_ns": start, "end_ns": time.monotonic_ns()})
        elif command[0] == "ask":
            rtts = []
            for _ in range(int(command[1])):
                began = time.perf_counter_ns()
                send_frames(pub, ping)
                recv_frames(sub)
                rtts.append((time.perf_counter_ns() - began) / 1000)
            emit({"rtt_us": rtts})


# ---------------------------------------------------------------- raw pyzmq + msgspec

METADATA_DECODER = msgspec.msgpack.Decoder(MessageMetadata)


def codec_receive(sub: zmq.Socket) -> tuple[bytes, MessageMetadata, zmq.Frame]:
    """One message of three frames (trusted, not checked): its key, decoded metadata, payload
    frame."""
    key = sub.recv(copy=False).bytes
    metadata = METADATA_DECODER.decode(sub.recv(copy=False))  # type: ignore[arg-type]  # a buffer
    return key, metadata, sub.recv(copy=False)


def codec_receiver(bus: str, count: int) -> None:
    pub, sub = raw_sockets(bus, CODEC_FRAGMENT_KEY, CODEC_PING_KEY)
    sub.setsockopt(zmq.RCVTIMEO, IDLE_MS)
    envelopes = Envelopes("bench-codec-receiver")
    fragments, queries = (
        msgspec.msgpack.Decoder(ResponseOutput).decode,
        msgspec.msgpack.Decoder(UserQuery).decode,
    )
    batches = Batches(count)
    print("ready", flush=True)
    while True:
        try:
            key, metadata, payload = codec_receive(sub)
        except zmq.Again:
            if batches.count:
                batches.close()
            continue
        if key == CODEC_PING_KEY:
            queries(payload)  # type: ignore[arg-type]  # a zmq.Frame is a buffer
            reply_to: str = metadata.reply_to  # type: ignore[assignment]  # a ping has one
            send_frames(pub, [reply_to.encode() + b"\x00p1\x00", envelopes.next(), ENCODE(ANSWER)])
        else:
            fragments(payload)  # type: ignore[arg-type]  # a zmq.Frame is a buffer
            if batches.arrived():
                batches.close()


def codec_sender(bus: str, count: int) -> None:
    pub, sub = raw_sockets(bus, CODEC_REPLY_KEY)
    envelopes = Envelopes("bench-codec-sender")
    answers = msgspec.msgpack.Decoder(ResponseOutput).decode
    print("ready", flush=True)
    while command := sys.stdin.readline().split():
        if command[0] == "send":
            start = time.monotonic_ns()
            for _ in range(count):
                send_frames(pub, [CODEC_FRAGMENT_KEY, envelopes.next(), ENCODE(FRAGMENT)])
            emit({"start_ns": start, "end_ns": time.monotonic_ns()})
        elif command[0] == "ask":
            rtts = []
            for _ in range(int(command[1])):
                began = time.perf_counter_ns()
                send_frames(
                    pub,
                    [CODEC_PING_KEY, envelopes.next("_inbox.bench-codec-sender"), ENCODE(QUERY)],
                )
                answers(codec_receive(sub)[2])  # type: ignore[arg-type]  # a zmq.Frame is a buffer
                rtts.append((time.perf_counter_ns() - began) / 1000)
            emit({"rtt_us": rtts})


ROLES = {
    "xrmq-receiver": lambda bus, count: run(xrmq_receiver(bus, count)),
    "xrmq-sender": lambda bus, count: run(xrmq_sender(bus, count)),
    "xrmq-fanout-receiver": lambda bus, count: run(xrmq_fanout_receiver(bus, count)),
    "raw-receiver": raw_receiver,
    "raw-sender": raw_sender,
    "codec-receiver": codec_receiver,
    "codec-sender": codec_sender,
}

if __name__ == "__main__":
    role, bus, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ROLES[role](bus, count)
