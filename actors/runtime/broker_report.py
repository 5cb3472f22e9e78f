"""The broker's heartbeat: what its libzmq proxy drops, published as ``RuntimeMetrics``.

The proxy loop is libzmq's and never surfaces a message, so what the broker refuses is
only visible as socket events: a publisher that sends a frame over
``max_message_bytes`` has its connection dropped by libzmq (``ZMQ_MAXMSGSIZE``) before
the frame is read. A monitor on the publish (XSUB) socket counts every dropped
publisher connection (``publishers_dropped``: oversize frames, protocol errors, and
publishers that exited), and this thread publishes the counts on ``METRICS_TOPIC``
under the runtime name ``broker``, through the broker's own publish endpoint, every
``interval`` seconds; ``xrmq top`` shows them with the other runtimes. With
``subscriptions`` (the inproc endpoint of the proxy's capture socket) it also counts the
live subscriptions per topic from the (un)subscription frames the proxy copies there.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import msgspec
import zmq
import zmq.utils.monitor

from xrmq.schemas import MessageMetadata, RuntimeMetrics
from xrmq.topics import METRICS_TOPIC

from .subscriptions import SubscriptionCounts

BROKER_NAME = "broker"


class BrokerReport:
    """Counts dropped publisher connections and publishes the broker's heartbeat."""

    def __init__(
        self,
        context: zmq.Context,
        publish: str,
        monitor: str,
        interval: float,
        gauges: dict[str, float],
        *,
        subscriptions: str | None = None,
    ) -> None:
        self.publishers_dropped = 0
        self.subscriptions = SubscriptionCounts()
        self._subscriptions = subscriptions
        self._context = context
        self._publish = publish
        self._monitor = monitor
        self._interval = interval
        self._gauges = gauges
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xrmq-broker-report", daemon=True)
        self._connected = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._connected.wait(5)

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
                    if event["event"] == zmq.EVENT_DISCONNECTED:
                        self.publishers_dropped += 1
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
                        "broker.publishers_dropped": float(self.publishers_dropped),
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
            events.close(linger=0)
            pub.close(linger=0)
            if subs is not None:
                subs.close(linger=0)
