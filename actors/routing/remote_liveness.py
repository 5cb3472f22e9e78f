"""A proxy's watch over the destination runtimes it talks to: is the one serving a call alive?

``RemoteAgent`` holds one ``DestinationLiveness``; it keeps every runtime the proxy has
heard from (its newest incarnation, and when), the runtime found dead, and the calls
waiting for a restart. It runs the two failure detectors of the route protocol
(``remote_protocol.py``, "A destination that dies"), so a dead destination costs its
own turn only instead of leaving it open:

- with ``dead_after_s`` (heartbeats watched): a call whose runtime sent nothing for
  ``dead_after_s``, or heartbeat as a newer incarnation, fails at once with
  ``DestinationDied``; the next requests wait (at most ``timeout_s``) for that runtime
  to heartbeat again, and a request that went to a runtime which then restarted is sent
  again, since the new incarnation never saw it;
- without: after every ``liveness_s`` of silence the proxy asks the call's ``status``,
  and a destination that no longer knows the call, or does not answer, fails it.

A cached routing aid is used only while its runtime is alive, the same incarnation,
and was heard from within the window (``fresh``). ``ProxyCall`` is one answer call in
flight at the proxy: its events, and what these detectors and the closing of its reply
streams need.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

from xrmq.schemas.routing import CallState, RouteAids, RouteEvent

from .remote_protocol import DestinationDied

_SERVERS_KEPT = 64
"""Destination runtimes a proxy remembers having heard from (incarnation and time)."""
_CHECKS_PER_DEADLINE = 8
"""How often, per ``dead_after_s``, a waiting call checks its destination is alive."""


class ProxyCall:
    """One answer call in flight at the proxy: its events, and what death detection needs."""

    __slots__ = (
        "arrived",
        "died",
        "epoch",
        "events",
        "participant_id",
        "replaced",
        "runtime",
        "seen_at",
        "spoke",
        "streams",
        "turn_id",
    )

    def __init__(self, participant_id: str, turn_id: str) -> None:
        self.participant_id = participant_id
        self.turn_id = turn_id
        self.events: deque[RouteEvent] = deque()
        self.arrived = asyncio.Event()
        """Set when an event arrives or the destination is found dead."""
        self.runtime: str | None = None
        """The runtime that accepted the call (None until it did)."""
        self.epoch = 0
        self.seen_at = 0.0
        """When that runtime was last heard from (loop time)."""
        self.died: str | None = None
        self.replaced = False
        """Whether it died by being replaced: a new incarnation has heartbeat already."""
        self.streams: dict[str, tuple[str, str]] = {}
        """Reply streams the call has open: response id -> (source, runtime) publishing it."""
        self.spoke = False
        """Whether a nonblank reply fragment of the call was seen (with ``output_topic``)."""


class DestinationLiveness:
    """What a ``RemoteAgent`` named ``name`` knows of its destination's runtimes.

    ``timeout_s``, ``dead_after_s`` and ``liveness_s`` are the proxy's (``RemoteAgent``);
    ``log`` is its logger.
    """

    def __init__(
        self,
        name: str,
        *,
        timeout_s: float,
        dead_after_s: float | None,
        liveness_s: float,
        log: Any,
    ) -> None:
        self.name = name
        self._log = log
        self.timeout_s = timeout_s
        self.dead_after_s = dead_after_s
        self.liveness_s = liveness_s
        self.servers: OrderedDict[str, tuple[int, float]] = OrderedDict()
        """Destination runtimes heard from: runtime -> (newest epoch, when; loop time)."""
        self._dead: tuple[str, int] | None = None
        """The (runtime, epoch) found dead, until that runtime is heard from again."""
        self._revived = asyncio.Event()
        self._restarts: dict[str, set[asyncio.Future[int]]] = {}
        """By destination runtime: futures resolved with the epoch of a newer incarnation of it
        when one is heard."""

    # -- what the proxy hears -------------------------------------------------------------

    def fresh(self, cached: RouteAids) -> bool:
        """Whether a cached aid may be used: its runtime is alive, the same incarnation, and
        was heard from within ``dead_after_s`` (or ``liveness_s``)."""
        if self._dead is not None:
            return False
        server = self.servers.get(cached.runtime)
        if server is None or server[0] != cached.epoch:
            return False
        window = self.dead_after_s if self.dead_after_s is not None else self.liveness_s
        return asyncio.get_running_loop().time() - server[1] <= window

    def heard(self, runtime: str, epoch: int) -> None:
        """A message from ``runtime`` (incarnation ``epoch``): a reply, a publication, a
        heartbeat of a runtime already known."""
        known = self.servers.get(runtime)
        if known is not None and epoch < known[0]:
            return  # an older incarnation's late message
        if known is not None and epoch > known[0]:
            for restarted in self._restarts.pop(runtime, ()):
                if not restarted.done():
                    restarted.set_result(epoch)
        dead = self._dead
        if dead is not None and dead[0] == runtime and epoch >= dead[1]:
            self._dead = None  # it answered (a reply or a publication): it is back
            self._revived.set()
        self.servers[runtime] = (epoch, asyncio.get_running_loop().time())
        self.servers.move_to_end(runtime)
        if len(self.servers) > _SERVERS_KEPT:
            self.servers.popitem(last=False)

    def heard_call(self, call: ProxyCall, sender: str, epoch: int) -> None:
        """A message of ``call`` from ``sender``: the call's runtime is alive if it sent it."""
        if sender == call.runtime and epoch == call.epoch:
            call.seen_at = asyncio.get_running_loop().time()
            self.heard(call.runtime, call.epoch)

    def heartbeat(self, sender: str, epoch: int, calls: Iterable[ProxyCall]) -> None:
        """A runtime's heartbeat: its calls' destination is alive, or restarted (a newer
        epoch: each of its calls of an older one died)."""
        if sender in self.servers:
            self.heard(sender, epoch)
        if self._dead is not None and self._dead[0] == sender and epoch >= self._dead[1]:
            self._dead = None
            self._revived.set()
        for call in calls:
            if call.runtime != sender:
                continue
            if epoch == call.epoch:
                call.seen_at = asyncio.get_running_loop().time()
            elif epoch > call.epoch and call.died is None:
                call.died = f"its process {sender!r} was restarted (a new incarnation)"
                call.replaced = True
                call.arrived.set()

    def buried(self, call: ProxyCall) -> None:
        """The call's runtime died: remember it dead until it is heard from again."""
        if call.runtime is not None and not call.replaced:  # replaced: the new one is up already
            self._dead = (call.runtime, call.epoch)
            self._revived.clear()

    # -- waiting for a call ---------------------------------------------------------------

    async def event(
        self, call: ProxyCall, status: Callable[[], Awaitable[CallState]]
    ) -> RouteEvent:
        """The call's next event, its runtime watched by whichever detector is on: heartbeats
        (``dead_after_s``), else a ``status()`` ask after every ``liveness_s`` of silence."""
        while True:
            deadline = None  # heartbeats watch the destination (dead_after_s)
            if self.dead_after_s is None:
                deadline = asyncio.get_running_loop().time() + self.liveness_s
            event = await self.next_event(call, deadline)
            if event is not None:
                return event
            await self._check_running(call, status)  # silent: does it still run the call?

    async def next_event(self, call: ProxyCall, deadline: float | None = None) -> RouteEvent | None:
        """The call's next event; None once ``deadline`` (loop time) passed; ``DestinationDied``
        as soon as the runtime running the call is found dead (with ``dead_after_s``)."""
        loop = asyncio.get_running_loop()
        dead_after_s = self.dead_after_s
        watch = dead_after_s is not None
        while True:
            if call.events:
                return call.events.popleft()
            if watch and call.runtime is not None:
                silent = loop.time() - call.seen_at
                if call.died is None and silent > cast(float, dead_after_s):
                    call.died = f"its process {call.runtime!r} sent nothing for {silent:.1f}s"
                if call.died is not None:
                    raise DestinationDied(self.name, f"DestinationLost: {call.died}")
            wait = None
            if watch and call.runtime is not None:
                wait = cast(float, dead_after_s) / _CHECKS_PER_DEADLINE
            if deadline is not None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                wait = remaining if wait is None else min(wait, remaining)
            call.arrived.clear()
            if wait is None:
                await call.arrived.wait()
                continue
            try:
                await asyncio.wait_for(call.arrived.wait(), wait)
            except TimeoutError:
                pass

    async def _check_running(
        self, call: ProxyCall, status: Callable[[], Awaitable[CallState]]
    ) -> None:
        """``DestinationDied`` (``DestinationLost``) unless the destination still runs the call."""
        try:
            state: CallState | None = await status()
        except TimeoutError:
            state = None
        if call.events or state in ("running", "finished"):
            return  # an event arrived meanwhile, or it is still at work
        if state == "unknown":
            raise DestinationDied(
                self.name,
                "DestinationLost: the destination no longer "
                "knows this answer (it restarted mid-turn)",
            )
        raise DestinationDied(
            self.name,
            "DestinationLost: the destination stopped "
            f"answering (no reply to a status check within {self.timeout_s:g}s)",
        )

    # -- sending a request ----------------------------------------------------------------

    async def revival(self) -> bool:
        """Wait (at most ``timeout_s``) for a dead destination to heartbeat again; False if not.

        Only with heartbeats watched (``dead_after_s``): without, no heartbeat would ever
        announce it, and waiting would fail every request after the destination was once
        found dead (a status check unanswered within ``timeout_s``), long after a restarted
        process was back. Then the request itself probes it: the dead mark only makes the
        cached aids stale, and a reply from that runtime clears it (``heard``).
        """
        if self._dead is None or self.dead_after_s is None:
            return True
        try:
            await asyncio.wait_for(self._revived.wait(), self.timeout_s)
        except TimeoutError:
            return False
        return True

    def dead_reason(self) -> str:
        runtime = self._dead[0] if self._dead is not None else "?"
        return f"its process {runtime!r} died and was not back within {self.timeout_s:g}s"

    async def answered(
        self,
        send: Callable[[float], asyncio.Future[Any]],
        participant_id: str,
        serving: str | None,
        sent: list[asyncio.Future[Any]],
    ) -> None:
        """Wait until the request ``sent[-1]`` is answered (or failed), sending it again with
        ``send(timeout left)`` (appended to ``sent``) when a new incarnation of the runtime
        serving ``participant_id`` is heard first that started after the request was sent
        (its epoch is its start time): a request sent to a destination that died between
        turns went to nobody, and its restarted process never sees it, so the turn would be
        declined after ``timeout_s`` instead of answered. One that started before may have
        it already, and is left to answer it once.

        Only with heartbeats watched (``dead_after_s``), which announce the restart; the
        serving runtime is ``serving`` (the one of the participant's routing aid), else the
        only one heard.
        """
        if self.dead_after_s is None:
            return
        if serving is None and len(self.servers) == 1:
            serving = next(iter(self.servers))
        if serving is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        sent_us = time.time_ns() // 1000
        while not sent[-1].done():
            restarted: asyncio.Future[int] = loop.create_future()
            self._restarts.setdefault(serving, set()).add(restarted)
            try:
                await asyncio.wait((sent[-1], restarted), return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting = self._restarts.get(serving)
                if waiting is not None:
                    waiting.discard(restarted)
                    if not waiting:
                        del self._restarts[serving]
                restarted.cancel()
            if sent[-1].done():
                return
            left = deadline - loop.time()
            if left <= 0:
                return
            if not restarted.cancelled() and restarted.result() <= sent_us:
                continue  # up before the request left: it has it, and answers it
            sent[-1].cancel()
            self._log.info("remote.request_resent", participant=participant_id, runtime=serving)
            sent_us = time.time_ns() // 1000
            sent.append(send(left))
