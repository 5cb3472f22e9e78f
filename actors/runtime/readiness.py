"""The readiness handshake of ``AgentRuntime.start``: every subscription probed through the
broker before ``start()`` returns.

A probe is published under a key its own subscription matches (``<prefix>`` then
``PROBE_MARK`` and a random id, after the second NUL), so its return proves the broker holds
that subscription and that this runtime's publisher reaches the broker: nothing the runtime
sends or expects afterwards is lost to ZeroMQ's slow joiner. Probes are resent, with a
doubling interval, until each has come back: the first can be lost while connections and
subscriptions are still being set up. The reader hands every control frame it reads to
``returned``; ``wait`` is what ``start`` awaits.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable

from xrmq.topics import SEP

PROBE_MARK = b"?"
"""Starts the suffix of a probe's key (after the key's second NUL)."""


class Readiness:
    """The probes of one ``start()``: armed from the subscriptions, answered by the reader."""

    __slots__ = ("_event", "_probes")

    def __init__(self) -> None:
        self._probes: dict[bytes, bytes] = {}
        """Probe key -> the subscription prefix it proves."""
        self._event: asyncio.Event | None = None

    def arm(self, subscriptions: Iterable[bytes]) -> None:
        """One new probe per subscription prefix (a topic's, or a topic and participant's)."""
        self._event = asyncio.Event()
        for prefix in subscriptions:
            key = prefix + (SEP if prefix.count(SEP) == 1 else b"") + PROBE_MARK
            self._probes[key + uuid.uuid4().hex.encode()] = prefix

    def returned(self, key: bytes) -> None:
        """A control frame came back through the broker: the probe with this key, if any."""
        if self._probes.pop(key, None) is not None and not self._probes:
            assert self._event is not None  # probes are only pending while wait() runs
            self._event.set()

    def pending(self) -> list[str]:
        """The topics whose subscriptions have not answered yet, sorted."""
        return sorted(
            {prefix.split(SEP)[0].decode(errors="replace") for prefix in self._probes.values()}
        )

    def pending_participants(self) -> list[str]:
        """The participants named by subscriptions that have not answered yet, sorted (a
        CURVE identity bound to other participants is denied those)."""
        return sorted(
            {
                participant.decode(errors="replace")
                for prefix in self._probes.values()
                if (participant := prefix.split(SEP)[1])
            }
        )

    async def wait(
        self, send: Callable[[bytes], object], timeout: float, not_ready: Callable[[], str]
    ) -> None:
        """Send every pending probe (``send(key)``) until all came back; ``TimeoutError``
        with ``not_ready()`` after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        interval = 0.005
        event = self._event
        assert event is not None  # armed by start()
        while self._probes:
            for key in list(self._probes):
                send(key)
            event.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(not_ready())
            try:
                await asyncio.wait_for(event.wait(), min(interval, remaining))
            except TimeoutError:
                interval = min(interval * 2, 0.5)
