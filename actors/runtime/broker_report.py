"""The broker's heartbeat: what its libzmq proxy drops, published as ``RuntimeMetrics``.

The proxy loop is libzmq's and never surfaces a message, so what the broker refuses is
only visible as socket events: a publisher that sends a frame over
``max_message_bytes`` has its connection dropped by libzmq (``ZMQ_MAXMSGSIZE``) before
the frame is read. libzmq reports that drop exactly as it reports a publisher that
went away (``EVENT_DISCONNECTED``, nothing else), so a monitor on the publish (XSUB)
socket tells them apart by who closed the connection: on ``EVENT_ACCEPTED`` it keeps a
duplicate of the connection's descriptor (``PeerWatch``), and on the disconnect it
looks at it before closing it. If the peer closed its end (end of stream, or a reset)
the publisher left (``publishers_left``); if the peer is still there, or data it sent
is still unread, libzmq dropped it: an oversize frame or a protocol error
(``publishers_dropped``). Only connects and disconnects cost anything; the proxy's path
is untouched. (A publisher that sends an oversize frame and exits at once, with every
byte of it already read by libzmq, counts as left.)

This thread publishes the counts on ``METRICS_TOPIC`` under the runtime name
``broker``, through the broker's own publish endpoint, every ``interval`` seconds;
``xrmq top`` shows them with the other runtimes. With ``subscriptions`` (the inproc
endpoint of the proxy's capture socket) it also counts the live subscriptions per topic
from the (un)subscription frames the proxy copies there.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

import msgspec
import zmq
import zmq.utils.monitor

from xrmq.schemas import MessageMetadata, RuntimeMetrics
from xrmq.topics import METRICS_TOPIC

from .subscriptions import SubscriptionCounts

BROKER_NAME = "broker"

MONITORED_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED
"""The publish socket's events the report reads: connections, and their ends."""


class PeerWatch:
    """Publisher connections by descriptor, to tell who closed one when it ends (see the
    module docstring). Bounded by the connections libzmq holds open."""

    def __init__(self) -> None:
        self._peers: dict[int, socket.socket] = {}
        self.left = 0
        """Connections the publisher closed (it exited, or its socket was closed)."""
        self.dropped = 0
        """Connections libzmq dropped with the publisher still there (an oversize frame,
        a protocol error), or whose end could not be told apart."""

    def __len__(self) -> int:
        return len(self._peers)

    def accepted(self, fd: int) -> None:
        """A new connection on descriptor ``fd``: keep a duplicate of it."""
        self._close(self._peers.pop(fd, None))
        try:
            self._peers[fd] = socket.socket(fileno=os.dup(fd))
        except OSError:  # already gone (closed before this event was read)
            pass

    def disconnected(self, fd: int) -> bool:
        """The connection on ``fd`` ended; count it. True: libzmq dropped it (not the peer)."""
        peer = self._peers.pop(fd, None)
        if peer is None:
            self.dropped += 1
            return True
        try:
            dropped = peer.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except BlockingIOError:
            dropped = True  # the peer is still connected: libzmq closed it
        except OSError:
            dropped = False  # reset by the peer: it went away
        finally:
            self._close(peer)
        if dropped:
            self.dropped += 1
        else:
            self.left += 1
        return dropped

    def close(self) -> None:
        for peer in self._peers.values():
            self._close(peer)
        self._peers.clear()

    @staticmethod
    def _close(peer: socket.socket | None) -> None:
        if peer is not None:
            try:
                peer.close()  # the last reference: the peer sees the end and reconnects
            except OSError:
                pass


class BrokerReport:
    """Counts dropped and departed publisher connections and publishes the broker's heartbeat."""

    def __init__(
        self,
        context: zmq.Context,
        publish: str,
        monitor: str,
        interval: float,
        gauges: dict[str, float],
        *,
        subscriptions: str | None = None,
        live_gauges: Callable[[], dict[str, float]] | None = None,
    ) -> None:
        self.peers = PeerWatch()
        self.subscriptions = SubscriptionCounts()
        self._subscriptions = subscriptions
        self._context = context
        self._publish = publish
        self._monitor = monitor
        self._interval = interval
        self._gauges = gauges
        self._live_gauges = live_gauges
        """Gauges read at each heartbeat (the broker's eviction count)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xrmq-broker-report", daemon=True)
        self._connected = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._connected.wait(5)

    @property
    def publishers_dropped(self) -> int:
        """Publisher connections libzmq dropped: an oversize frame or a protocol error."""
        return self.peers.dropped

    @property
    def publishers_left(self) -> int:
        """Publisher connections that ended because the publisher closed them."""
        return self.peers.left

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        events = self._context.socket(zmq.PAIR)
        events.connect(self._monitor)
        pub = self._context.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        pub.connect(self._publish)
        poller = zmq.Poller()
        poller.register(events, zmq.POLLIN)
        subs = None
        if self._subscriptions is not None:  # the proxy's capture: (un)subscription frames only
            subs = self._context.socket(zmq.SUB)
            subs.setsockopt(zmq.RCVHWM, 0)
            subs.setsockopt(zmq.LINGER, 0)
            subs.setsockopt(zmq.SUBSCRIBE, b"\x00")
            subs.setsockopt(zmq.SUBSCRIBE, b"\x01")
            subs.connect(self._subscriptions)
            poller.register(subs, zmq.POLLIN)
        self._connected.set()
        encoder = msgspec.msgpack.Encoder()
        epoch = time.time_ns() // 1000
        key = METRICS_TOPIC.key()
        seq = 0
        next_beat = time.monotonic()
        try:
            while not self._stop.is_set():
                timeout_ms = max(0, int((next_beat - time.monotonic()) * 1000))
                ready = dict(poller.poll(min(timeout_ms, 200)))
                if subs is not None and subs in ready:
                    while True:
                        try:
                            frames = subs.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        if len(frames) == 1:
                            self.subscriptions.frame(frames[0])
                if events in ready:
                    event = zmq.utils.monitor.recv_monitor_message(events)
                    if event["event"] == zmq.EVENT_ACCEPTED:
                        self.peers.accepted(event["value"])
                    elif event["event"] == zmq.EVENT_DISCONNECTED:
                        self.peers.disconnected(event["value"])
                if ready:
                    continue
                if time.monotonic() < next_beat:
                    continue
                next_beat += self._interval
                seq += 1
                now_us = time.time_ns() // 1000
                metrics = RuntimeMetrics(
                    runtime=BROKER_NAME,
                    epoch=epoch,
                    pid=os.getpid(),
                    timestamp_us=now_us,
                    published=0,
                    delivered=0,
                    gaps=0,
                    stale=0,
                    rejected=0,
                    overflow=0,
                    handler_errors=0,
                    gauges={
                        **self._gauges,
                        **(self._live_gauges() if self._live_gauges is not None else {}),
                        "broker.publishers_dropped": float(self.peers.dropped),
                        "broker.publishers_left": float(self.peers.left),
                    },
                    subscriptions=self.subscriptions.snapshot()
                    if self._subscriptions is not None
                    else {},
                )
                metadata = MessageMetadata(
                    uuid.uuid4().hex, BROKER_NAME, BROKER_NAME, epoch, seq, now_us
                )
                pub.send_multipart([key, encoder.encode(metadata), encoder.encode(metrics)])
        finally:
            self.peers.close()
            events.close(linger=0)
            pub.close(linger=0)
            if subs is not None:
                subs.close(linger=0)
