"""The secure broker: CURVE on every socket, ZAP by pyzmq, and the identity ACL in a Python loop.

``zmq.proxy`` cannot read who sent a message, so with ``mode = "curve"`` the broker
forwards in Python: each message from the XSUB side is received without copying, its
``User-Id`` (the identity pyzmq's ``ThreadAuthenticator`` named at the handshake) and
metadata frame are checked by ``AccessPolicy`` and it is forwarded (to the XPUB side
and the capture socket) or dropped, counted and logged. The XPUB side runs in manual
mode: each subscription is checked the same way and applied only if permitted; for an
identity bound to participants (``Permissions.participants``) it is applied narrowed to
the prefixes of its participants and of global messages (``AccessPolicy.
applied_subscriptions``), on that subscriber's connection only, so libzmq's own send side
never hands it another participant's message. An unsubscription removes the same narrowed
prefixes (a change of the identity's participants applies to its next subscriptions: what
an open connection subscribed to stays until it unsubscribes or disconnects). Every
``metrics_interval`` seconds the broker publishes its own ``RuntimeMetrics`` (runtime
``broker``) with the per-identity drop and denial counters (``xrmq top``).

Authentication is pyzmq's: a ``ThreadAuthenticator`` on the broker's own zmq context,
with a credentials callback per ZAP domain (``xrmq`` for the bus sockets,
``xrmq.capture`` for the capture socket, where only identities with ``capture`` get
in) and ``curve_user_id`` mapping a public key to its identity name.

Hot path of a CURVE bus (every message passes ``_messages``): benchmark before and after a
change here (``python -m bench curve``, see ``bench/README.md``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import msgspec
import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from xrmq.schemas import MessageMetadata, RuntimeMetrics

from .._compat import frame_send
from ..subscriptions import SubscriptionCounts
from .acl import AccessPolicy, Permissions

BUS_DOMAIN = "xrmq"
CAPTURE_DOMAIN = "xrmq.capture"
BROKER_NAME = "broker"
_BATCH = 256
_METRICS_KEY = b"xrmq.metrics\x00\x00"
_LOG_EVERY_S = 1.0
_NOBLOCK, _SNDMORE = int(zmq.NOBLOCK), int(zmq.SNDMORE)
_frame_send = frame_send
"""pyzmq's Cython send where available, as the runtime's own sends (``_compat``)."""


Rescan = Callable[[], Mapping[str, tuple[bytes, Permissions]] | None]
"""Returns the identities to admit when they changed since the last call, else None."""


class BrokerSecurity(msgspec.Struct, frozen=True):
    """The broker's key pair and the identities it admits: name -> (Z85 public key, permissions)."""

    public_key: bytes
    secret_key: bytes
    identities: dict[str, tuple[bytes, Permissions]]

    def __repr__(self) -> str:  # never the secret key, in a log line or a traceback
        return (
            f"BrokerSecurity(public_key={self.public_key!r}, identities={sorted(self.identities)})"
        )

    def serve(self, socket: zmq.Socket, domain: str) -> None:
        """Make ``socket`` a CURVE server in ``domain`` (before it binds)."""
        socket.zap_domain = domain.encode()
        socket.curve_server = True
        socket.curve_secretkey = self.secret_key
        socket.curve_publickey = self.public_key


class _Admission:
    """pyzmq's credentials-provider protocol: is this Z85 key admitted in this domain?"""

    def __init__(
        self,
        names: Callable[[], Mapping[bytes, str]],
        allowed: Callable[[str], bool],
        refused: Callable[[str, bytes, str], None],
    ) -> None:
        self._names = names
        self._allowed = allowed
        self._refused = refused

    def callback(self, domain: str, key: bytes) -> bool:
        name = self._names().get(key)
        if name is not None and self._allowed(name):
            return True
        self._refused(domain, key, name or "")
        return False


class IdentityAuthenticator(ThreadAuthenticator):
    """pyzmq's ZAP handler, with the identity's name as the connection's ``User-Id``.

    A refused handshake (an unknown key, or a known one without ``capture`` on the
    capture socket) is counted (``refused``) and logged at most once a second per key.
    """

    def __init__(
        self, context: zmq.Context, security: BrokerSecurity, policy: AccessPolicy, log: Any = None
    ) -> None:
        super().__init__(context)
        self._names: Mapping[bytes, str] = {}
        self.admit(security.identities)
        self.refused = 0
        self._refusals = _DropLog(log) if log is not None else None
        self.configure_curve_callback(
            BUS_DOMAIN, _Admission(lambda: self._names, lambda name: True, self._refuse)
        )
        self.configure_curve_callback(
            CAPTURE_DOMAIN, _Admission(lambda: self._names, policy.may_capture, self._refuse)
        )

    def admit(self, identities: Mapping[str, tuple[bytes, Permissions]]) -> None:
        """Admit exactly these keys at the next handshakes (one assignment: the ZAP thread
        sees the old table or the new one, never a mix)."""
        self._names = {public: name for name, (public, _) in identities.items()}

    def curve_user_id(self, client_public_key: bytes) -> str:
        return self._names.get(z85.encode(client_public_key), "")

    def _refuse(self, domain: str, key: bytes, name: str) -> None:
        self.refused += 1
        if self._refusals is not None:
            reason = "unknown key" if not name else f"identity {name!r} may not use {domain}"
            self._refusals(
                "broker.handshake_refused",
                name or key.decode(errors="replace"),
                reason,
                domain=domain,
            )


class _DropLog:
    """Logs drops at most once a second per (identity, kind), with how many it folded in."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def __call__(self, event: str, identity: str, reason: str, **fields: Any) -> None:
        now = time.monotonic()
        slot = (identity, event)
        last, folded = self._last.get(slot, (0.0, 0))
        if now - last < _LOG_EVERY_S:
            self._last[slot] = (last, folded + 1)
            return
        if len(self._last) > 10_000:
            self._last.clear()
        self._last[slot] = (now, 0)
        self._log.warning(event, identity=identity, reason=reason, folded=folded, **fields)


def _user_id(frame: zmq.Frame) -> str:
    """The identity ZAP named for the frame's connection ("" if none: then nothing passes)."""
    try:
        return cast(str, frame.get("User-Id"))
    except zmq.ZMQError:
        return ""


class Forwarder:
    """The secure broker's loop over bound sockets, until ``TERMINATE`` on ``control``."""

    def __init__(
        self,
        policy: AccessPolicy,
        frontend: zmq.Socket,
        backend: zmq.Socket,
        capture: zmq.Socket | None,
        control: zmq.Socket,
        log: Any,
        metrics_interval: float = 1.0,
        authenticator: IdentityAuthenticator | None = None,
        rescan: Rescan | None = None,
        rescan_interval: float = 1.0,
        evicted: Callable[[], int] | None = None,
    ) -> None:
        self.policy = policy
        self._evicted = evicted
        """The broker's count of subscriber connections shut past its byte budget."""
        self.authenticator = authenticator
        self.frontend, self.backend, self.capture, self.control = (
            frontend,
            backend,
            capture,
            control,
        )
        self.metrics_interval = metrics_interval
        self.rescan = rescan
        self.rescan_interval = rescan_interval
        self._log = log
        self.forwarded = 0
        self.dropped: dict[str, int] = {}
        """Messages dropped, by the identity that sent them."""
        self.denied: dict[str, int] = {}
        """Subscriptions denied, by the identity that asked."""
        self.subscriptions = SubscriptionCounts()
        """The subscriptions applied, per topic."""
        self._drop_log = _DropLog(log)
        self._epoch = time.time_ns() // 1000
        self._seq = 0
        self._encoder = msgspec.msgpack.Encoder()

    def run(self) -> None:
        poller = zmq.Poller()
        for sock in (self.frontend, self.backend, self.control):
            poller.register(sock, zmq.POLLIN)
        next_metrics = time.monotonic() + self.metrics_interval
        rescans = self.rescan is not None and self.rescan_interval > 0
        next_rescan = time.monotonic() + self.rescan_interval if rescans else float("inf")
        while True:
            timeout = max(0.0, min(next_metrics, next_rescan) - time.monotonic())
            ready = dict(poller.poll(int(timeout * 1000)))
            if self.control in ready and self.control.recv() == b"TERMINATE":
                return
            if self.backend in ready:
                self._subscriptions()
            if self.frontend in ready:
                self._messages()
            if time.monotonic() >= next_metrics:
                self._publish_metrics()
                next_metrics = time.monotonic() + self.metrics_interval
            if time.monotonic() >= next_rescan:
                self._rescan()
                next_rescan = time.monotonic() + self.rescan_interval

    def _rescan(self) -> None:
        """Admit the identities ``rescan`` found changed: a removed key is refused at its
        next handshake, and its open connections' messages are dropped (unknown identity)."""
        assert self.rescan is not None
        try:
            identities = self.rescan()
        except Exception as error:  # a bug in the re-scan must not stop the bus
            self._log.error("broker.rescan_failed", error=repr(error))
            return
        if identities is None:
            return
        before = set(self.policy.identities)
        self.policy.update({name: perms for name, (_, perms) in identities.items()})
        if self.authenticator is not None:
            self.authenticator.admit(identities)
        self._log.info(
            "broker.identities_changed",
            admitted=sorted(set(identities) - before),
            removed=sorted(before - set(identities)),
        )

    def _messages(self) -> None:
        """Forward or drop what publishers sent, a batch at a time (frames are never copied;
        per-frame sends with integer flags cost a third of ``send_multipart``'s)."""
        recv, check = self.frontend.recv, self.policy.check_message
        backend, capture = self.backend, self.capture
        send = _frame_send
        for _ in range(_BATCH):
            try:
                first = recv(_NOBLOCK, copy=False)
            except zmq.Again:
                return
            frames = [first]
            while frames[-1].more:
                frames.append(recv(copy=False))
            identity = _user_id(first)
            key = first.bytes
            if len(frames) != 3:
                reason: str | None = f"expected 3 frames, got {len(frames)}"
            else:
                try:
                    reason = check(identity, key, frames[1].buffer, len(frames[2]) == 0)
                except Exception as error:  # a bug in a check must not stop the bus: drop
                    reason = f"check failed: {error!r}"
            if reason is not None:
                self.dropped[identity] = self.dropped.get(identity, 0) + 1
                self._drop_log(
                    "broker.message_dropped",
                    identity,
                    reason,
                    key=key[:200].decode(errors="replace"),
                )
                continue
            _, metadata, payload = frames
            send(backend, first, _SNDMORE, copy=False)
            send(backend, metadata, _SNDMORE, copy=False)
            send(backend, payload, 0, copy=False)
            if capture is not None:
                send(capture, first, _SNDMORE, copy=False)
                send(capture, metadata, _SNDMORE, copy=False)
                send(capture, payload, 0, copy=False)
            self.forwarded += 1

    def _subscriptions(self) -> None:
        backend = self.backend
        for _ in range(_BATCH):
            try:
                message = backend.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            data = message.bytes
            if not data or data[0] not in (0, 1):
                continue  # not a subscription: subscribers have nothing else to say
            prefix = data[1:]
            identity = _user_id(message)
            if data[0] == 0:
                # what its subscription was narrowed to (a departed peer's: nothing to undo)
                for applied in self._applied(identity, prefix):
                    backend.setsockopt(zmq.UNSUBSCRIBE, applied)
                self.subscriptions.unsubscribed(prefix)
                continue
            try:
                reason = self.policy.check_subscription(identity, prefix)
                applied_prefixes = self.policy.applied_subscriptions(identity, prefix)
            except Exception as error:  # a bug in a check must not stop the bus: deny
                reason = f"check failed: {error!r}"
            if reason is None:
                for applied in applied_prefixes:  # each applies to the peer just read
                    backend.setsockopt(zmq.SUBSCRIBE, applied)
                self.subscriptions.subscribed(prefix)
                continue
            self.denied[identity] = self.denied.get(identity, 0) + 1
            self._drop_log(
                "broker.subscription_denied",
                identity,
                reason,
                prefix=prefix[:200].decode(errors="replace"),
            )

    def _applied(self, identity: str, prefix: bytes) -> list[bytes]:
        """The prefixes a subscription of ``identity`` was applied as, to unsubscribe them:
        narrowed ones and the prefix itself (applied before a re-scan bound the identity);
        libzmq ignores an unsubscription of a prefix the peer does not hold."""
        try:
            narrowed = self.policy.applied_subscriptions(identity, prefix)
        except Exception as error:  # a bug in a check must not stop the bus
            self._log.error("broker.unsubscribe_failed", error=repr(error))
            narrowed = []
        return list(dict.fromkeys([*narrowed, prefix]))

    def metrics(self) -> RuntimeMetrics:
        """The broker's counters: forwarded messages and per-identity drops and denials."""
        return RuntimeMetrics(
            runtime=BROKER_NAME,
            epoch=self._epoch,
            pid=os.getpid(),
            timestamp_us=time.time_ns() // 1000,
            published=0,
            delivered=self.forwarded,
            gaps=0,
            stale=0,
            rejected=sum(self.dropped.values()) + sum(self.denied.values()),
            overflow=0,
            handler_errors=0,
            identity=BROKER_NAME,
            dropped=dict(self.dropped),
            denied=dict(self.denied),
            subscriptions=self.subscriptions.snapshot(),
            gauges={
                **(
                    {"broker.handshakes_refused": self.authenticator.refused}
                    if self.authenticator is not None
                    else {}
                ),
                **(
                    {"broker.subscribers_evicted": self._evicted()}
                    if self._evicted is not None
                    else {}
                ),
            },
        )

    def _publish_metrics(self) -> None:
        self._seq += 1
        now = time.time_ns() // 1000
        message_id = f"{BROKER_NAME}:{self._epoch:x}:{self._seq:x}"
        metadata = MessageMetadata(
            message_id, "runtime", BROKER_NAME, self._epoch, self._seq, now, message_id
        )
        encode = self._encoder.encode
        frames = (_METRICS_KEY, encode(metadata), encode(self.metrics()))
        for sock in (self.backend, self.capture):  # the capture too: what ``xrmq topics`` reads
            if sock is None:
                continue
            try:
                sock.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                pass
