"""Test support for the secure bus: tcp loopback ports from the OS, key pairs, an in-process
secure broker, and a raw CURVE client (pyzmq + MessagePack, like a foreign client)."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path

import msgspec
import zmq
from zmq.utils.monitor import recv_monitor_message

from xrmq.actors.runtime.address import BusAddress, parse_bus
from xrmq.actors.runtime.broker import Broker, BrokerError
from xrmq.actors.runtime.security import BrokerSecurity, Permissions, create_keypair
from xrmq.actors.runtime.security.keys import load_public, load_secret

HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


def free_tcp_bus(host: str = "127.0.0.1") -> str:
    """A ``tcp://HOST:PORT`` bus whose three ports (PORT..PORT+2) the OS had free just now."""
    for _ in range(100):
        with closing(socket.socket()) as first:
            first.bind((host, 0))
            port = first.getsockname()[1]
            if port > 65530:
                continue
            others = [socket.socket() for _ in range(2)]
            try:
                for offset, sock in enumerate(others, 1):
                    sock.bind((host, port + offset))
            except OSError:
                continue
            finally:
                for sock in others:
                    sock.close()
            return f"tcp://{host}:{port}"
    raise RuntimeError("no three consecutive free tcp ports")


def make_keys(directory: Path, *names: str) -> Path:
    for name in names:
        create_keypair(name, directory)
    return directory


class SecureBus:
    def __init__(self, bus: str, keys: Path, broker: Broker) -> None:
        self.bus, self.keys, self.broker = bus, keys, broker
        self.address: BusAddress = parse_bus(bus)

    def key(self, name: str) -> Path:
        return self.keys / f"{name}.key_secret"

    @property
    def server_key(self) -> Path:
        return self.keys / "broker.key"

    def client(self, name: str | None, **kwargs) -> CurveClient:
        """A raw client with ``name``'s key pair (None: no key at all)."""
        return CurveClient(self, name, **kwargs)


@contextmanager
def secure_broker(
    keys: Path, identities: Mapping[str, Permissions], *, capture: bool = True
) -> Iterator[SecureBus]:
    """An in-process CURVE broker on a free loopback tcp bus; ``keys`` must hold ``broker`` and each
    identity's pair."""
    public, secret = load_secret(keys / "broker.key_secret")
    security = BrokerSecurity(
        public,
        secret,
        {name: (load_public(keys / f"{name}.key"), perms) for name, perms in identities.items()},
    )
    for attempt in range(5):
        bus = free_tcp_bus()
        try:
            broker = Broker(parse_bus(bus), capture=capture, security=security).start()
            break
        except BrokerError:  # a port taken between the check and the bind
            if attempt == 4:
                raise
    try:
        yield SecureBus(bus, keys, broker)
    finally:
        broker.stop()


class CurveClient:
    """PUB, SUB and (optionally) capture sockets of one raw client; CURVE when it has a key."""

    def __init__(self, bus: SecureBus, name: str | None, *, capture: bool = False) -> None:
        self.context = zmq.Context()
        self.name = name
        self.sender = f"{name or 'nokey'}-{uuid.uuid4().hex[:8]}"
        self.epoch = time.time_ns() // 1000
        self.seq = 0
        self.pub = self._socket(zmq.PUB, bus, name)
        self.sub = self._socket(zmq.SUB, bus, name)
        self.capture = self._socket(zmq.SUB, bus, name) if capture else None
        self.probes = 0
        self._monitors = [sock.get_monitor_socket() for sock in self.sockets]
        self.pub.connect(bus.address.publish)
        self.sub.connect(bus.address.subscribe)
        if self.capture is not None:
            self.capture.connect(bus.address.capture)

    def _socket(self, kind: int, bus: SecureBus, name: str | None) -> zmq.Socket:
        sock = self.context.socket(kind)
        if name is not None:
            public, secret = load_secret(bus.key(name))
            sock.curve_publickey, sock.curve_secretkey = public, secret
            sock.curve_serverkey = load_public(bus.server_key)
        return sock

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Readiness: a probe on this client's private key comes back through the broker."""
        private = f"_probe.{self.sender}".encode() + b"\x00"
        self.subscribe(private)
        probe = private + b"\x00?" + uuid.uuid4().hex.encode()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pub.send_multipart([probe, b"", b""])
            if self.sub.poll(20) and self.sub.recv_multipart()[0] == probe:
                while self.sub.poll(0):  # the other probes of the loop
                    self.sub.recv_multipart()
                return
        raise TimeoutError("curve client: the broker did not answer the probe")

    def wait_capture_ready(self, timeout: float = 10.0) -> None:
        """Readiness of the capture socket: a capture probe comes back on it (``xrmq record``'s)."""
        probe = b"xrmq.capture\x00\x00?" + uuid.uuid4().hex.encode()
        assert self.capture is not None, "the client was made with capture=True"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pub.send_multipart([probe, b"", b""])
            if self.capture.poll(20):
                while self.capture.poll(0):
                    if self.capture.recv_multipart()[0] == probe:
                        return
        raise TimeoutError("curve client: no capture probe came back")

    def wait_for(
        self, topic: str, sock: zmq.Socket | None = None, timeout: float = 10.0
    ) -> list[list[bytes]]:
        """Receive until a message of ``topic`` arrives; every message received, in order."""
        sock = sock or self.sub
        prefix = topic.encode() + b"\x00"
        found = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sock.poll(20):
                frames = sock.recv_multipart()
                found.append(frames)
                if frames[0].startswith(prefix):
                    return found
        raise TimeoutError(f"nothing on {topic!r} within {timeout}s (got {found})")

    @property
    def sockets(self) -> list[zmq.Socket]:
        return [sock for sock in (self.pub, self.sub, self.capture) if sock is not None]

    def handshakes_failed(self, timeout: float = 10.0) -> bool:
        """Wait until every socket's handshake with the broker failed; False if one succeeded."""
        deadline = time.monotonic() + timeout
        for monitor in self._monitors:
            while True:
                if not monitor.poll(int(max(0, deadline - time.monotonic()) * 1000)):
                    raise TimeoutError("no handshake result from the broker")
                event = recv_monitor_message(monitor)["event"]
                if event & zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    return False
                if event & HANDSHAKE_FAILED:
                    break
        return True

    def subscribe(self, prefix: bytes, sock: zmq.Socket | None = None) -> None:
        (sock or self.sub).setsockopt(zmq.SUBSCRIBE, prefix)

    def metadata(self, **fields) -> bytes:
        self.seq += 1
        base = {
            "message_id": uuid.uuid4().hex,
            "source": "test",
            "sender": self.sender,
            "epoch": self.epoch,
            "seq": self.seq,
            "timestamp_us": time.time_ns() // 1000,
        }
        return msgspec.msgpack.encode({**base, **fields})

    def send(self, topic: str, participant: str | None, payload: dict, **fields) -> str:
        key = topic.encode() + b"\x00" + (participant or "").encode() + b"\x00"
        meta = {"participant_id": participant, **fields}
        encoded = self.metadata(**meta)
        self.pub.send_multipart([key, encoded, msgspec.msgpack.encode(payload)])
        return msgspec.msgpack.decode(encoded)["message_id"]

    def received(self, sock: zmq.Socket | None = None) -> list[list[bytes]]:
        """Everything waiting on ``sock`` (the SUB socket by default), without waiting."""
        sock = sock or self.sub
        found = []
        while sock.poll(0):
            found.append(sock.recv_multipart())
        return found

    def close(self) -> None:
        for sock in self.sockets:
            sock.disable_monitor()
        for monitor in self._monitors:
            monitor.close(linger=0)
        for sock in self.sockets:
            sock.close(linger=0)
        self.context.term()
