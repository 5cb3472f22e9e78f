"""One runtime's connection to the bus: the embedded broker if any, the PUB socket (to the
broker's XSUB) and the SUB socket (from its XPUB), and the readiness handshake.

``open`` connects and subscribes; ``wait_ready`` probes every subscription until it comes
back through the broker (``readiness.py``), so nothing sent or expected after ``start()`` is
lost to ZeroMQ's slow joiner; ``flush`` waits, at stop, until what was sent has passed the
broker; ``close`` closes the sockets and stops an embedded broker.
Heartbeats (``METRICS_TOPIC``) are subscribed to as well, except on a CURVE bus: they reveal
the lost tails of streams, but reading them there is a permission of its own (they name
every stream's key), so an identity detects lost tails only if one of its actors subscribes
to xrmq.metrics.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import zmq

from xrmq.schemas._validation import check_positive
from xrmq.topics import METRICS_TOPIC

from .address import BusAddress, parse_bus
from .broker import Broker, shared_context
from .readiness import Readiness
from .security.keys import ClientCredentials, client_credentials


def resolve_bus(
    bus: str | BusAddress | None,
    key: str | os.PathLike[str] | None,
    server_key: str | os.PathLike[str] | bytes | None,
) -> tuple[BusAddress, ClientCredentials | None]:
    """A runtime's bus address and CURVE credentials (``AgentRuntime``'s ``bus``, ``key`` and
    ``server_key``); None: a new embedded bus, which has no broker to authenticate to."""
    if bus is None:
        if key is not None or server_key is not None:
            raise ValueError("key: an embedded bus has no broker to authenticate to")
        return parse_bus(f"inproc://xrmq-embedded-{uuid.uuid4().hex}"), None
    address = bus if isinstance(bus, BusAddress) else parse_bus(bus)
    return address, client_credentials(key, server_key)


class BusConnection:
    """The sockets of one runtime; see the module docstring."""

    def __init__(
        self,
        address: BusAddress,
        credentials: ClientCredentials | None,
        *,
        embedded: bool,
        hwm: int,
        max_message_bytes: int,
        ready_timeout: float,
    ) -> None:
        check_positive(max_message_bytes, "max_message_bytes")
        self.address = address
        self.credentials = credentials
        self.embedded = embedded
        self.hwm = hwm
        self.max_message_bytes = max_message_bytes
        self.ready_timeout = ready_timeout
        self.readiness = Readiness()
        self.broker: Broker | None = None
        self.pub: zmq.Socket | None = None
        self.sub: zmq.Socket | None = None

    def open(self, subscriptions: set[bytes]) -> tuple[zmq.Socket, zmq.Socket]:
        """Start the embedded broker (if any), connect both sockets, subscribe; the (PUB, SUB)."""
        if self.embedded:
            self.broker = Broker(
                self.address, hwm=self.hwm, max_message_bytes=self.max_message_bytes
            ).start()
        context = shared_context()
        self.pub = pub = context.socket(zmq.PUB)
        pub.setsockopt(zmq.SNDHWM, self.hwm)
        pub.setsockopt(zmq.LINGER, 2000)
        self.sub = sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.RCVHWM, self.hwm)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        if self.credentials is not None:
            self.credentials.apply(pub)
            self.credentials.apply(sub)
        pub.connect(self.address.publish)
        sub.connect(self.address.subscribe)
        for prefix in sorted(subscriptions):
            sub.setsockopt(zmq.SUBSCRIBE, prefix)
        heartbeats = METRICS_TOPIC.subscription()
        if heartbeats not in subscriptions and self.credentials is None:
            sub.setsockopt(zmq.SUBSCRIBE, heartbeats)  # not a readiness condition
        return pub, sub

    async def wait_ready(self, subscriptions: set[bytes]) -> None:
        """Probe each subscription until its probe comes back through the broker;
        ``TimeoutError`` naming what did not answer after ``ready_timeout``."""
        pub = self.pub
        assert pub is not None  # connected by open()
        self.readiness.arm(subscriptions)
        await self.readiness.wait(
            lambda key: pub.send_multipart((key, b"", b"")), self.ready_timeout, self._not_ready
        )

    def _not_ready(self) -> str:
        """Why ``start`` gives up; on a CURVE bus, naming the subscriptions still unanswered."""
        where = f"bus: no broker answered at {self.address.subscribe}"
        message = f"{where} within {self.ready_timeout}s"
        if self.credentials is None:
            return message
        pending = self.readiness.pending()
        participants = self.readiness.pending_participants()
        listening = f" as participant {', '.join(map(repr, participants))}" if participants else ""
        return (
            f"{message} (CURVE identity {self.credentials.identity!r}: is its key admitted, "
            f"and may it subscribe to {', '.join(pending)}{listening}?)"
        )

    async def flush(self, prefix: bytes, timeout: float, log: Any) -> None:
        """Return once everything the PUB socket queued so far has passed the broker (a
        probe on ``prefix``, a subscription of this runtime, sent behind it came back,
        resent until then), so closing the socket discards none of it (``ZMQ_LINGER``
        would, after 2 s): a runtime's final heartbeat reaches the broker however much it
        queued before it. After ``timeout`` seconds without an answer (no broker), logs
        what it could not confirm and returns."""
        pub = self.pub
        if pub is None:
            return
        self.readiness.arm([prefix])
        try:
            await self.readiness.wait(
                lambda key: pub.send_multipart((key, b"", b"")), timeout, lambda: ""
            )
        except TimeoutError:
            log.warning(
                "runtime.final_heartbeat_unconfirmed",
                timeout_s=timeout,
                reason="no broker answered: what was queued last may not have left",
            )

    async def close(self) -> None:
        """Close the sockets and stop the embedded broker."""
        if self.sub is not None:
            self.sub.close()
        if self.pub is not None:
            self.pub.close()
        if self.broker is not None:
            await asyncio.to_thread(self.broker.stop)
