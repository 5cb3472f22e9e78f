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
byte of it already read by libzmq, counts as left.) The monitor's events arrive late under
load: a connection that ended before its ``EVENT_ACCEPTED`` was read has no duplicate to
look at and counts as dropped; ``broker.publishers_watched`` (the connections with a
duplicate kept) tells a client when the broker has seen its connection.

This thread publishes the counts on ``METRICS_TOPIC`` under the runtime name
``broker``, through the broker's own publish endpoint, every ``interval`` seconds;
``xrmq top`` shows them with the other runtimes. With ``subscriptions`` (the inproc
endpoint of the proxy's capture socket) it also counts the live subscriptions per topic
from the (un)subscription frames the proxy copies there, and reads the runtimes'
heartbeats copied there too: a runtime's final heartbeat (``RuntimeMetrics.final``, its
streams' tails as it stops) is the one message that nothing repeats, and the broker drops
it for a subscriber whose queue is full at that moment, so that subscriber could never
count the tail it lost. The broker repeats each final ``last_seq`` in its own next
``TAIL_REPEATS`` heartbeats (``RuntimeMetrics.tails``, ``TailReplay``): by then a
subscriber that drained its queue receives one, and counting a tail is idempotent.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import zmq
import zmq.utils.monitor

from xrmq.schemas import MessageMetadata, RuntimeMetrics, StreamTails
from xrmq.topics import METRICS_TOPIC

from .edge_checks import DECODE_ERRORS
from .subscriptions import SubscriptionCounts

BROKER_NAME = "broker"

MONITORED_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED
"""The publish socket's events the report reads: connections, and their ends."""

TAIL_REPEATS = 10
"""Broker heartbeats that repeat a stopped runtime's tails (10 s at the default 1 s)."""
TAIL_SENDERS = 1_024
"""Stopped runtimes whose tails are held at once (the oldest are dropped, and counted)."""
TAIL_KEYS_PER_BEAT = 2_048
"""Stream keys one broker heartbeat repeats at most (the rest in the next ones)."""

_metadata_decoder = msgspec.msgpack.Decoder(MessageMetadata)
_metrics_decoder = msgspec.msgpack.Decoder(RuntimeMetrics)


class TailReplay:
    """The final ``last_seq`` of runtimes that stopped lately, repeated in the broker's next
    heartbeats (see the module docstring). Bounded: ``TAIL_SENDERS`` runtimes, each repeated
    ``TAIL_REPEATS`` times, at most ``TAIL_KEYS_PER_BEAT`` keys per heartbeat (and per
    runtime: its newest); a runtime whose tails are dropped unrepeated is counted in
    ``dropped``, keys beyond a runtime's share in ``keys_dropped``."""

    def __init__(
        self,
        repeats: int = TAIL_REPEATS,
        senders: int = TAIL_SENDERS,
        keys_per_beat: int = TAIL_KEYS_PER_BEAT,
    ) -> None:
        self._repeats, self._senders, self._keys_per_beat = repeats, senders, keys_per_beat
        self._tails: dict[tuple[str, int], list[Any]] = {}
        """By (sender, epoch): [last seq by key, repeats left]; oldest first."""
        self.dropped = 0
        self.refused = 0
        """Heartbeat frames that did not decode (a publisher's bug, or a forgery)."""
        self.keys_dropped = 0
        """Stream keys of one runtime beyond ``keys_per_beat``, not repeated."""

    def __len__(self) -> int:
        return len(self._tails)

    def heartbeat(self, metadata_frame: bytes, payload: bytes) -> None:
        """A runtime's heartbeat passed the proxy: keep its tails if it is a final one."""
        try:
            metadata = _metadata_decoder.decode(metadata_frame)
            heartbeat = _metrics_decoder.decode(payload)
        except DECODE_ERRORS:
            self.refused += 1  # its receivers count it as rejected too
            return
        if not heartbeat.final or not heartbeat.last_seq or metadata.sender == BROKER_NAME:
            return
        stream = (metadata.sender, metadata.epoch)
        held = self._tails.pop(stream, None)  # a final heartbeat in several parts: merged
        seqs = {**held[0], **heartbeat.last_seq} if held is not None else dict(heartbeat.last_seq)
        if len(seqs) > self._keys_per_beat:  # one heartbeat must stay within the message limit
            self.keys_dropped += len(seqs) - self._keys_per_beat
            seqs = dict(list(seqs.items())[-self._keys_per_beat :])
        self._tails[stream] = [seqs, self._repeats]
        while len(self._tails) > self._senders:
            del self._tails[next(iter(self._tails))]
            self.dropped += 1

    def due(self) -> list[StreamTails]:
        """The tails this heartbeat repeats: the held ones in turn, within the key budget."""
        due: list[StreamTails] = []
        keys = 0
        for stream in list(self._tails):
            seqs, left = self._tails.pop(stream)
            if keys and keys + len(seqs) > self._keys_per_beat:
                self._tails[stream] = [seqs, left]  # next time; order kept by reinsertion
                continue
            keys += len(seqs)
            due.append(StreamTails(stream[0], stream[1], seqs))
            if left > 1:
                self._tails[stream] = [seqs, left - 1]
        return due


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
        self.tails = TailReplay()
        self.frame_faults = 0
        """Captured frames whose handling raised (counted, skipped: see ``_run``)."""
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
            subs.setsockopt(zmq.SUBSCRIBE, METRICS_TOPIC.subscription())  # final heartbeats
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
                        try:
                            if len(frames) == 1:
                                self.subscriptions.frame(frames[0])
                            elif len(frames) == 3:
                                self.tails.heartbeat(frames[1], frames[2])
                        except Exception:  # a frame must never end the report: the proxy
                            self.frame_faults += 1  # stalls once its monitor is not read
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
                        "broker.publishers_watched": float(len(self.peers)),
                        "broker.tails_held": float(len(self.tails)),
                        "broker.tails_dropped": float(self.tails.dropped),
                        "broker.heartbeats_refused": float(self.tails.refused),
                        "broker.tail_keys_dropped": float(self.tails.keys_dropped),
                        "broker.report_frame_faults": float(self.frame_faults),
                    },
                    tails=self.tails.due(),
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
