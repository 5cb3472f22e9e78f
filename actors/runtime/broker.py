"""The bus broker: an XSUB/XPUB proxy with an optional capture socket.

Publishers connect to the XSUB side, subscribers to the XPUB side. The XSUB side
subscribes to everything, so every publisher sends every message to the broker and
subscriptions only have to reach the broker, not each publisher. That is what makes
the runtime's readiness probe sufficient: once a probe published on a subscription
has come back through the broker, every later message on that subscription, from
any publisher, reaches the subscriber.

The proxy loop is libzmq's own (``zmq.proxy_steerable``) on a thread of its own; it
never decodes payloads.
"""

from __future__ import annotations

import fcntl
import os
import threading
import uuid
from pathlib import Path

import zmq

from .address import BusAddress
from .logs import get_logger

DEFAULT_HWM = 1_000_000
"""High-water mark for bus sockets: large and explicit (PUB/XPUB drop past it; receivers count the
gap)."""


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
        self, address: BusAddress, *, capture: bool = False, hwm: int = DEFAULT_HWM
    ) -> None:
        self.address = address
        self.capture = capture
        self.hwm = hwm
        self._control = f"inproc://xrmq-broker-control-{uuid.uuid4().hex}"
        self._bound = threading.Event()
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

    def stop(self) -> None:
        if not self._bound.is_set() or self._bind_error is not None:
            return
        # libzmq 4.3.5's steerable proxy can miss a single TERMINATE (seen here about
        # once in fifty stops), so it is repeated until the proxy thread has ended.
        stopper = shared_context().socket(zmq.PAIR)
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

    def _serve(self) -> None:
        context = shared_context()
        sockets: list[zmq.Socket] = []

        def socket(kind: int) -> zmq.Socket:
            sock = context.socket(kind)
            sockets.append(sock)
            sock.setsockopt(zmq.LINGER, 0)
            return sock

        try:
            self._claim_ipc_paths()
            frontend = socket(zmq.XSUB)
            frontend.setsockopt(zmq.RCVHWM, self.hwm)
            frontend.setsockopt(zmq.SNDHWM, self.hwm)
            frontend.bind(self.address.publish)
            frontend.send(b"\x01")  # subscribe to everything, upstream
            backend = socket(zmq.XPUB)
            backend.setsockopt(zmq.SNDHWM, self.hwm)
            backend.setsockopt(zmq.RCVHWM, self.hwm)
            backend.bind(self.address.subscribe)
            capture = None
            if self.capture:
                capture = socket(zmq.PUB)
                capture.setsockopt(zmq.SNDHWM, self.hwm)
                capture.bind(self.address.capture)
            control = socket(zmq.PAIR)
            control.bind(self._control)
        except BaseException as error:  # reported to start(); nothing else holds the sockets
            for sock in sockets:
                sock.close()
            self._release_ipc_paths()
            self._bind_error = BrokerError(f"bus: cannot bind {self.address.publish}: {error}")
            self._bound.set()
            return
        self._log.info("broker.ready", subscribe=self.address.subscribe, capture=self.capture)
        self._bound.set()
        try:
            zmq.proxy_steerable(frontend, backend, capture, control)
        except zmq.ContextTerminated:
            pass
        finally:
            for sock in sockets:
                sock.close()
            self._release_ipc_paths()
            self._log.info("broker.stopped")

    def _claim_ipc_paths(self) -> None:
        """Lock the bus for this broker and remove stale socket files of a dead one."""
        paths = self.address.ipc_paths
        if not paths:
            return
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
