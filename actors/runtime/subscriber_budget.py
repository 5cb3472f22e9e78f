"""The broker's per-subscriber byte budget: a subscriber that stops reading cannot make the
broker hold more than ``budget_bytes`` for it.

Why not a HWM: the XPUB side queues for each subscriber connection in a pipe of its own,
bounded by ``ZMQ_SNDHWM``, which counts messages, not bytes (65,536 messages held 600 x 1
MiB for one stalled subscriber: +561 MB). A HWM small enough to hold the budget in the worst
case (``budget // max_message_bytes``: 16 messages at the defaults) drops half of a burst for
subscribers that do read: libzmq's proxy thread learns that a pipe drained only every so many
messages, so a pipe that small looks full to it while its reader keeps up. Nor can the broker
count bytes per subscriber itself: XPUB fans a message out to every matching pipe inside
libzmq and tells nobody which pipe is full or when one drains (a loop of its own would need a
socket per subscriber; subscribers are SUB sockets of one endpoint). So the HWM stays sized
for typical messages (``subscriber_hwm``) and this guard bounds the bytes:

- What the broker holds is measured, not estimated: the process's heap bytes in use
  (glibc ``mallinfo2``, else resident memory) above what it used when it became ready.
  libzmq allocates every queued message there, once, however many pipes share it. (The
  measure is the whole process's: ``xrmq bus`` holds only the broker; a broker started
  inside a larger process counts that process's growth too.)
- Which subscriber holds it is the one whose connection does not drain: its kernel send
  queue (``TIOCOUTQ``) is full and has not moved for ``STILL_S`` (20 ms). libzmq queues a
  message in a pipe only while the connection cannot take it, so a subscriber whose kernel
  queue moves is being served; one that stopped reading (stopped, hung, its own receive queue
  full) keeps it full and still.
- Every ``interval`` (5 ms), when the broker holds more than ``budget_bytes``, the
  connection stalled the longest is shut down (one per look, so a reader that was only
  descheduled is not cut along with the one that holds the bytes): libzmq drops the
  connection and frees everything queued for it at once. The subscriber's socket
  reconnects and subscribes again by itself; what was queued for it, and what was
  published until it was back, it reports as gaps (the runtime's
  loss accounting: ``RuntimeMetrics.gaps``, the rate-limited ``bus.gap`` warning, a lost tail
  by the sender's heartbeat). The broker counts the connections it shut (``evicted``, the
  heartbeat's ``broker.subscribers_evicted``) and logs each (rate-limited). The most it has
  measured at a look since ready is ``peak_held`` (the heartbeat's ``broker.held_bytes_peak``):
  what an operator sizes the budget by, and what a test of the bound reads (the process's
  resident size also counts heap that glibc keeps after libzmq frees an evicted queue).

So the bound is in bytes, for all stalled subscribers together (stricter than per
subscriber): the budget plus what arrives while a stall is confirmed (``STILL_S`` plus one
interval; 200 KB messages from one publisher over ipc: about 16 MiB here). A subscriber
whose reader keeps up is not cut for what others hold. A stalled one loses everything
queued for it (not only what passed the budget): libzmq cannot drop part of a pipe. The
monitor and the ioctls run on this guard's thread; the proxy's path is untouched. The
capture socket's subscribers (``xrmq capture``) connect to a PUB socket of their own: the
broker watches that socket's connections the same way (``arm`` it too), so one that stops
reading costs the same budget.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import socket
import struct
import termios
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import zmq
import zmq.utils.monitor

from .ratelimit import AggregatedWarnings

DEFAULT_INTERVAL_S = 0.005
"""How often the guard looks at what the broker holds (the overshoot is what arrives meanwhile)."""
STILL_S = 0.02
"""How long a connection's full send queue must stay unchanged before the guard takes its
subscriber as stalled (a reader's moves within that; one descheduled that long may be cut
only if it has been still longer than every other)."""
_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
        )
    ]


def heap_meter() -> Callable[[], int]:
    """A function returning the bytes this process holds: heap bytes in use (glibc
    ``mallinfo2``: what libzmq's queued messages occupy), else resident memory."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError, TypeError):
        page = os.sysconf("SC_PAGE_SIZE")

        def resident() -> int:
            with open("/proc/self/statm") as statm:
                return int(statm.read().split()[1]) * page

        return resident
    mallinfo2.restype = _MallInfo2

    def in_use() -> int:
        info = mallinfo2()
        return int(info.uordblks + info.hblkhd)

    return in_use


def local_address(endpoint: str) -> str | int | None:
    """What ``getsockname()`` of a connection accepted on ``endpoint`` shows: the ipc path, the
    tcp port; None when not known."""
    if endpoint.startswith("ipc://"):
        return endpoint[len("ipc://") :]
    if endpoint.startswith("tcp://"):
        port = endpoint.rpartition(":")[2]
        return int(port) if port.isdigit() else None
    return None


def _local_of(peer: socket.socket) -> str | int | None:
    try:
        name = peer.getsockname()
    except OSError:
        return None
    if isinstance(name, str):
        return name
    if isinstance(name, bytes):  # an abstract ipc address: libzmq writes it "@name"
        return "@" + name[1:].decode(errors="replace")
    if isinstance(name, tuple) and len(name) >= 2:
        return int(name[1])
    return None


def send_queue(peer: socket.socket) -> int:
    """Bytes in ``peer``'s kernel send queue, not yet taken by the other end."""
    raw = fcntl.ioctl(peer.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    return int(struct.unpack("i", raw)[0])


class SubscriberBudget:
    """Shuts the connections of stalled subscribers while the broker holds more than
    ``budget_bytes`` (see the module docstring). ``arm(socket)`` on the XPUB socket's own
    thread before the proxy starts; ``start()``; ``stop()``."""

    def __init__(
        self,
        context: zmq.Context,
        budget_bytes: int,
        log: Any,
        endpoint: str,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        meter: Callable[[], int] | None = None,
    ) -> None:
        self.budget_bytes = budget_bytes
        self._local = local_address(endpoint)
        """The subscribe endpoint's own address: a descriptor whose socket is not on it was
        reused by another connection (one of publishers) before its event was read."""
        self._monitors: list[tuple[str, str | int | None]] = []
        """Each watched socket's monitor endpoint, and the address its connections are on."""
        self.evicted = 0
        """Subscriber connections shut for holding the broker past the budget."""
        self._context = context
        self._interval = interval
        self._meter = meter or heap_meter()
        self._baseline = 0
        self.peak_held = 0
        """The most the broker held (``held``) at any look since it became ready."""
        # fd -> [duplicate of the connection, its send queue at the last look, since when the
        # queue has been full and unchanged]
        self._peers: dict[int, list[Any]] = {}
        self._warnings = AggregatedWarnings(log)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xrmq-broker-budget", daemon=True)

    def arm(self, backend: zmq.Socket, endpoint: str | None = None) -> None:
        """Watch the connections of ``backend``, bound on ``endpoint`` (default: the one
        this guard was made for); call on the thread that owns it, before ``start``."""
        monitor = f"inproc://xrmq-broker-subscribers-{uuid.uuid4().hex}"
        backend.monitor(monitor, _EVENTS)
        local = local_address(endpoint) if endpoint is not None else self._local
        self._monitors.append((monitor, local))

    def start(self) -> None:
        self._baseline = self._meter()
        self._thread.start()
        self._ready.wait(5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    @property
    def held(self) -> int:
        """Bytes the broker holds beyond what it held when it became ready."""
        return max(0, self._meter() - self._baseline)

    def _run(self) -> None:
        poller = zmq.Poller()
        watched: dict[zmq.Socket, str | int | None] = {}
        for monitor, local in self._monitors:
            events = self._context.socket(zmq.PAIR)
            events.setsockopt(zmq.LINGER, 0)
            events.connect(monitor)
            poller.register(events, zmq.POLLIN)
            watched[events] = local
        self._ready.set()
        timeout_ms = max(1, int(self._interval * 1000))
        try:
            while not self._stop.is_set():
                for events, _ in poller.poll(timeout_ms):
                    while True:
                        try:
                            event = zmq.utils.monitor.recv_monitor_message(events, zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._event(event["event"], event["value"], watched[events])
                self._look()
                self._warnings.flush()
        finally:
            for events in watched:
                events.close()
            for entry in self._peers.values():
                entry[0].close()
            self._peers.clear()
            self._warnings.flush_all()

    def _event(self, kind: int, fd: int, local: str | int | None = None) -> None:
        """A connection accepted or ended on descriptor ``fd`` of a socket bound on
        ``local`` (None: not known, not checked)."""
        if kind == zmq.EVENT_ACCEPTED:
            old = self._peers.pop(fd, None)
            if old is not None:
                old[0].close()
            try:
                peer = socket.socket(fileno=os.dup(fd))
            except OSError:  # already gone
                return
            if local is not None and _local_of(peer) != local:
                peer.close()  # the descriptor was closed and reused meanwhile: not a subscriber
                return
            self._peers[fd] = [peer, -1, time.monotonic()]
        elif kind == zmq.EVENT_DISCONNECTED:
            gone = self._peers.pop(fd, None)
            if gone is not None:
                gone[0].close()

    def _look(self) -> None:
        """Note each connection's send queue; past the budget, shut the one that has been full
        and still the longest (at least ``STILL_S``), one per look."""
        now = time.monotonic()
        held = self.held
        self.peak_held = max(self.peak_held, held)
        longest: tuple[float, int, int] | None = None
        for fd, entry in self._peers.items():
            peer, last, since = entry
            try:
                queued = send_queue(peer)
                full = queued > 0 and queued * 2 >= peer.getsockopt(
                    socket.SOL_SOCKET, socket.SO_SNDBUF
                )
            except OSError:
                continue
            if not full or queued != last:
                entry[1], entry[2] = queued, now
            elif now - since >= STILL_S and (longest is None or since < longest[0]):
                longest = since, fd, queued
        if longest is None or held <= self.budget_bytes:
            return
        _, fd, queued = longest
        peer = self._peers.pop(fd)[0]
        try:
            peer.shutdown(socket.SHUT_RDWR)  # libzmq drops the connection and its queue
        except OSError:
            pass
        peer.close()
        self.evicted += 1
        self._warnings.warn(
            "broker.subscriber_evicted",
            None,
            None,
            held_bytes=held,
            budget_bytes=self.budget_bytes,
            send_queue_bytes=queued,
            evicted=self.evicted,
        )
