"""A test transport: a broker that drops the messages a predicate picks (a lossy hop).

An XSUB/XPUB forwarder in Python on a thread, bound at the endpoints of an ipc bus,
like ``xrmq bus`` but reading each message: ``drop(frames)`` says which ones never
reach a subscriber. Subscriptions pass upstream untouched. Nothing else is lost: its
queue to subscribers is unbounded (zmq's default send HWM of 1,000 messages drops when a
receiver on a loaded box lags a burst, a loss the test did not choose). Its queue from
publishers keeps zmq's default, so a paused bus backs their sends up on their side.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import zmq


class LossyBus:
    def __init__(self, prefix: str, drop: Callable[[list[bytes]], bool]) -> None:
        self.address = f"ipc://{prefix}"
        self.drop = drop
        self.dropped = 0
        self._context = zmq.Context()
        self._front = self._context.socket(zmq.XSUB)
        self._front.bind(f"ipc://{prefix}.in")
        self._back = self._context.socket(zmq.XPUB)
        self._back.setsockopt(zmq.SNDHWM, 0)
        self._back.bind(f"ipc://{prefix}.out")
        self._front.send(b"\x01")
        self._stop = threading.Event()
        self.paused = threading.Event()
        """While set, nothing is read from publishers (a broker that stalls: what they send
        queues on their side)."""
        self._thread = threading.Thread(target=self._serve, name="lossy-bus", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._front, zmq.POLLIN)
        poller.register(self._back, zmq.POLLIN)
        subscriptions = zmq.Poller()
        subscriptions.register(self._back, zmq.POLLIN)
        while not self._stop.is_set():
            for sock, _ in (subscriptions if self.paused.is_set() else poller).poll(50):
                if sock is self._back:
                    self._front.send(self._back.recv())
                    continue
                frames = self._front.recv_multipart()
                if self.drop(frames):
                    self.dropped += 1
                else:
                    self._back.send_multipart(frames)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._front.close(linger=0)
        self._back.close(linger=0)
        self._context.term()
