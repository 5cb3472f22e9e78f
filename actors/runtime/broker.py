"""The bus broker: an XSUB/XPUB proxy with an optional capture socket.

Publishers connect to the XSUB side, subscribers to the XPUB side. The XSUB side
subscribes to everything, so every publisher sends every message to the broker and
subscriptions only have to reach the broker, not each publisher. That is what makes
the runtime's readiness probe sufficient: once a probe published on a subscription
has come back through the broker, every later message on that subscription, from
any publisher, reaches the subscriber.

The proxy loop is libzmq's own (``zmq.proxy_steerable``) on a thread of its own; it
never decodes payloads. With ``security`` (``mode = "curve"``) every socket is a CURVE
server, pyzmq's authenticator admits the configured identities, and the loop is
``security.forwarder``'s, which checks each message's metadata and each subscription
against the identity's permissions (the plain bus keeps libzmq's loop: no cost there).

Per-subscriber budget (``subscriber_budget_bytes``, default 64 MiB): what the broker may
hold for subscribers that stopped reading, in bytes. The XPUB send HWM counts messages
(``subscriber_hwm``, sized for typical messages so that subscribers that read never lose
a burst); the bytes are held by ``SubscriberBudget`` (``subscriber_budget.py``, where the
why is): past the budget, the connections of subscribers that do not drain are shut,
which frees what was queued for them; they reconnect and report what they missed as gaps,
and the broker counts them (``subscribers_evicted``, ``broker.subscribers_evicted``). The
capture socket's subscribers are held to the same budget and HWM.

Subscriber counts (``RuntimeMetrics.subscriptions``, ``xrmq topics``): the secure loop
counts the subscriptions it applies. The plain broker with ``metrics_interval`` sets
``ZMQ_XPUB_VERBOSER``, so every subscription and unsubscription (one per prefix of a
subscriber that leaves, too) passes the proxy, which copies it to its capture socket;
that socket also binds an inproc endpoint where the heartbeat thread reads only those
frames (``broker_report``).
"""

from __future__ import annotations

import fcntl
import os
import threading
import uuid
from pathlib import Path

import zmq

from xrmq.actors.logs import get_logger
from xrmq.schemas._validation import check_positive

from .address import BusAddress, UnsafeDirectoryError, check_ipc_directories
from .broker_report import MONITORED_EVENTS, BrokerReport
from .security.acl import AccessPolicy
from .security.forwarder import (
    BUS_DOMAIN,
    CAPTURE_DOMAIN,
    BrokerSecurity,
    Forwarder,
    IdentityAuthenticator,
    Rescan,
)
from .subscriber_budget import SubscriberBudget

DEFAULT_HWM = 1_000_000
"""High-water mark for bus sockets: large and explicit (PUB/XPUB drop past it; receivers count the
gap)."""
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""``ZMQ_MAXMSGSIZE`` of every receiving socket: a larger frame drops the sender's connection
(libzmq does not read it; the sender reconnects and receivers see the messages lost meanwhile
as gaps)."""
DEFAULT_SUBSCRIBER_BUDGET_BYTES = 64 * 1024 * 1024
"""What the broker may hold, in bytes, for subscribers that stopped reading
(``SubscriberBudget``)."""
MESSAGE_BYTES_ESTIMATE = 1024
"""A typical bus message, for the send HWM (counted in messages) that goes with the budget."""


def subscriber_hwm(budget_bytes: int) -> int:
    """The broker's per-subscriber send HWM for a byte budget: as many typical messages as it
    holds (the bytes themselves are held by ``SubscriberBudget``, whatever the sizes)."""
    return max(1000, budget_bytes // MESSAGE_BYTES_ESTIMATE)


def shared_context() -> zmq.Context:
    """The process-wide zmq context (``inproc://`` endpoints need one context)."""
    return zmq.Context.instance()


class BrokerError(RuntimeError):
    """The broker could not bind its endpoints."""


class Broker:
    """One bus: binds the endpoints of ``address`` and forwards between them.

    ``start()`` runs the proxy on a daemon thread and returns once the endpoints are
    bound; ``stop()`` terminates it, closes the sockets and removes ipc socket files.
    ``xrmq bus`` starts one and stops it on SIGINT/SIGTERM.
    """

    def __init__(
        self,
        address: BusAddress,
        *,
        capture: bool = False,
        hwm: int = DEFAULT_HWM,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        subscriber_budget_bytes: int = DEFAULT_SUBSCRIBER_BUDGET_BYTES,
        metrics_interval: float | None = None,
        security: BrokerSecurity | None = None,
        rescan: Rescan | None = None,
        rescan_interval: float = 1.0,
    ) -> None:
        if security is not None and address.publish.startswith("inproc://"):
            raise BrokerError("bus: CURVE needs an ipc:// or tcp:// bus, not inproc://")
        self.address = address
        self.capture = capture
        self.hwm = hwm
        self.max_message_bytes = max_message_bytes
        check_positive(subscriber_budget_bytes, "subscriber_budget_bytes")
        self.subscriber_budget_bytes = subscriber_budget_bytes
        self.subscriber_hwm = min(hwm, subscriber_hwm(subscriber_budget_bytes))
        self._budget: SubscriberBudget | None = None
        self.metrics_interval = metrics_interval
        self._report: BrokerReport | None = None
        self.security = security
        self.rescan, self.rescan_interval = rescan, rescan_interval
        """With ``security``: who is admitted is re-read every ``rescan_interval`` seconds."""
        self.forwarder: Forwarder | None = None
        """The secure loop (its drop counters) while a secure broker serves."""
        # A secure broker has a context of its own: ZAP's handler is one per context.
        self._context = shared_context() if security is None else zmq.Context()
        self._control = f"inproc://xrmq-broker-control-{uuid.uuid4().hex}"
        self._bound = threading.Event()
        self._stopped = threading.Event()
        self._bind_error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._lock_file: int | None = None
        self._log = get_logger(component="broker", bus=address.publish)

    def start(self) -> Broker:
        self._thread = threading.Thread(target=self._serve, name="xrmq-broker", daemon=True)
        self._thread.start()
        self._bound.wait()
        if self._bind_error is not None:
            self._thread.join()
            raise self._bind_error
        return self

    @property
    def publishers_dropped(self) -> int | None:
        """Publisher connections the broker dropped (a frame over ``max_message_bytes``, a
        protocol error); None without ``metrics_interval`` (nothing counts them)."""
        return None if self._report is None else self._report.publishers_dropped

    @property
    def subscribers_evicted(self) -> int:
        """Subscriber connections shut for holding the broker past ``subscriber_budget_bytes``."""
        return 0 if self._budget is None else self._budget.evicted

    @property
    def held_bytes_peak(self) -> int:
        """The most the subscriber budget's guard measured the broker holding since it became
        ready (see ``SubscriberBudget.peak_held``); 0 without a guard (an inproc bus)."""
        return 0 if self._budget is None else self._budget.peak_held

    @property
    def publishers_left(self) -> int | None:
        """Publisher connections their publisher closed (it exited or went away); None
        without ``metrics_interval``."""
        return None if self._report is None else self._report.publishers_left

    def stop(self) -> None:
        if not self._bound.is_set() or self._bind_error is not None or self._stopped.is_set():
            return
        # libzmq 4.3.5's steerable proxy can miss a single TERMINATE (seen here about
        # once in fifty stops), so it is repeated until the proxy thread has ended.
        stopper = self._context.socket(zmq.PAIR)
        stopper.connect(self._control)
        try:
            while True:
                try:
                    stopper.send(b"TERMINATE", zmq.NOBLOCK)
                except zmq.Again:
                    pass
                assert self._thread is not None  # bound: start() ran
                self._thread.join(0.05)
                if not self._thread.is_alive():
                    return
        finally:
            stopper.close(linger=0)
            if self.security is not None:
                self._context.term()

    def _serve(self) -> None:
        context = self._context
        sockets: list[zmq.Socket] = []
        security = self.security
        policy = authenticator = None
        if security is not None:
            policy = AccessPolicy({name: perms for name, (_, perms) in security.identities.items()})
            authenticator = IdentityAuthenticator(context, security, policy, self._log)
            authenticator.start()

        def socket(kind: int) -> zmq.Socket:
            sock = context.socket(kind)
            sockets.append(sock)
            sock.setsockopt(zmq.LINGER, 0)
            return sock

        umask = None
        try:
            self._claim_ipc_paths()
            if self.address.ipc_paths:
                umask = os.umask(0o177)  # sockets are created 0600, whatever the process's umask
            frontend = socket(zmq.XSUB)
            frontend.setsockopt(zmq.RCVHWM, self.hwm)
            frontend.setsockopt(zmq.SNDHWM, self.hwm)
            frontend.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
            if security is not None:
                security.serve(frontend, BUS_DOMAIN)
            frontend.bind(self.address.publish)
            counted = None  # the plain broker counts subscriptions off its capture socket
            if self.metrics_interval:
                monitor = f"inproc://xrmq-broker-monitor-{uuid.uuid4().hex}"
                frontend.monitor(monitor, MONITORED_EVENTS)
                gauges = {
                    "broker.subscriber_hwm": float(self.subscriber_hwm),
                    "broker.subscriber_budget_bytes": float(self.subscriber_budget_bytes),
                    "broker.max_message_bytes": float(self.max_message_bytes),
                }
                if security is None:
                    counted = f"inproc://xrmq-broker-subscriptions-{uuid.uuid4().hex}"
                self._report = BrokerReport(
                    context,
                    self.address.publish,
                    monitor,
                    self.metrics_interval,
                    gauges,
                    subscriptions=counted,
                    live_gauges=lambda: {
                        "broker.subscribers_evicted": float(self.subscribers_evicted),
                        "broker.held_bytes_peak": float(self.held_bytes_peak),
                    },
                )
            frontend.send(b"\x01")  # subscribe to everything, upstream
            backend = socket(zmq.XPUB)
            backend.setsockopt(zmq.SNDHWM, self.subscriber_hwm)  # per subscriber, bounds a stall
            backend.setsockopt(zmq.RCVHWM, self.hwm)
            backend.setsockopt(zmq.MAXMSGSIZE, 64 * 1024)  # subscriptions only
            budget = None  # an inproc bus has no connections to shut (nor a kernel queue)
            if not self.address.subscribe.startswith("inproc://"):
                budget = SubscriberBudget(
                    context, self.subscriber_budget_bytes, self._log, self.address.subscribe
                )
                budget.arm(backend)
            if security is not None:
                security.serve(backend, BUS_DOMAIN)
                backend.setsockopt(zmq.XPUB_MANUAL, 1)  # the forwarder applies permitted ones
            if counted is not None:  # every (un)subscription reaches the proxy, so its capture
                backend.setsockopt(zmq.XPUB_VERBOSER, 1)
            backend.bind(self.address.subscribe)
            capture = None
            if self.capture or counted is not None:
                capture = socket(zmq.PUB)
                capture.setsockopt(zmq.SNDHWM, self.subscriber_hwm)  # a subscriber's, too
                if security is not None:
                    security.serve(capture, CAPTURE_DOMAIN)
                if self.capture:
                    if budget is not None:  # a capture subscriber costs the same budget
                        budget.arm(capture, self.address.capture)
                    capture.bind(self.address.capture)
                if counted is not None:
                    capture.bind(counted)
            control = socket(zmq.PAIR)
            control.bind(self._control)
            for path in self.address.ipc_paths:
                if path.exists():
                    os.chmod(path, 0o600)  # and stay so, for a umask changed under us
        except BaseException as error:  # reported to start(); nothing else holds the sockets
            for sock in sockets:
                sock.close()
            if authenticator is not None:
                authenticator.stop()
            self._release_ipc_paths()
            if umask is not None:
                os.umask(umask)
            self._bind_error = (
                error
                if isinstance(error, UnsafeDirectoryError)
                else BrokerError(f"bus: cannot bind {self.address.publish}: {error}")
            )
            self._bound.set()
            return
        if umask is not None:
            os.umask(umask)
        self._budget = budget
        if budget is not None:
            budget.start()
        if self._report is not None:
            self._report.start()
        self._log.info(
            "broker.ready",
            subscribe=self.address.subscribe,
            capture=self.capture,
            subscriber_hwm=self.subscriber_hwm,
            subscriber_budget_bytes=self.subscriber_budget_bytes,
            max_message_bytes=self.max_message_bytes,
            security="curve" if security is not None else "none",
        )
        if policy is not None:
            self.forwarder = Forwarder(
                policy,
                frontend,
                backend,
                capture,
                control,
                self._log,
                authenticator=authenticator,
                rescan=self.rescan,
                rescan_interval=self.rescan_interval,
                evicted=lambda: self.subscribers_evicted,
            )
        self._bound.set()
        try:
            if self.forwarder is not None:
                self.forwarder.run()
            else:
                zmq.proxy_steerable(frontend, backend, capture, control)
        except zmq.ContextTerminated:
            pass
        finally:
            if budget is not None:
                budget.stop()
            if self._report is not None:
                self._report.stop()
            for sock in sockets:
                sock.close()
            if authenticator is not None:
                authenticator.stop()
            self._release_ipc_paths()
            self._stopped.set()
            self._log.info("broker.stopped")

    def _claim_ipc_paths(self) -> None:
        """Lock the bus for this broker and remove stale socket files of a dead one."""
        paths = self.address.ipc_paths
        if not paths:
            return
        check_ipc_directories(self.address)
        lock_path = Path(str(paths[0]).removesuffix(".in") + ".lock")
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise BrokerError(f"a broker already serves {self.address.publish}") from None
        self._lock_file = fd
        for path in paths:
            path.unlink(missing_ok=True)

    def _release_ipc_paths(self) -> None:
        if self._lock_file is None:
            return
        for path in self.address.ipc_paths:
            path.unlink(missing_ok=True)
        lock_path = Path(str(self.address.ipc_paths[0]).removesuffix(".in") + ".lock")
        lock_path.unlink(missing_ok=True)
        os.close(self._lock_file)
        self._lock_file = None
