"""The server side of the route protocol: serve a local destination on the bus.

``DestinationServer`` (from ``serve(name, agent)``) is registered with the runtime of
the process that hosts ``agent``, and exposes it as destination ``name`` to the
``RemoteAgent`` proxies of routers in other processes (``remote_protocol.py`` gives the
exchange). It admits and starts answering a turn in one request, so the answer does not
wait for a second request from the proxy; runs each answer on a task it owns, reporting how
it ended after the destination finished (so after its final frame); and publishes a
participant's routing aid whenever it changes, so proxies need not ask it per turn.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from xrmq.actors.runtime import DEFERRED_REPLY, Agent, Handlers, RuntimeContext, get_logger
from xrmq.actors.runtime.ratelimit import AggregatedWarnings
from xrmq.schemas import Admission, DestinationResult, RoutingAid
from xrmq.schemas.routing import (
    ROUTE_PROTOCOL,
    CallState,
    RouteAidAsk,
    RouteAids,
    RouteCallStatus,
    RouteEvent,
    RouteOutcome,
    RouteRequest,
    RouteSignal,
    RouteTurn,
)
from xrmq.topics import Topic

from .destination import (
    RoutableAgent,
    RoutingTurnContext,
    check_routable,
    routed_turn,
    routing_aid_of,
)
from .failure import describe_failure
from .remote_protocol import AIDS_KEPT, DestinationTopics

_FINISHED_KEPT = 256
"""How many ended call ids a server remembers, to answer ``finished`` to a late status ask."""


class _Call:
    __slots__ = ("began", "held", "proceed", "task")

    def __init__(self, held: bool) -> None:
        self.task: asyncio.Task[DestinationResult] | None = None
        self.proceed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.held = held
        """Whether the first chunk waits for the proxy's ``proceed``."""
        self.began = False
        """Whether the answer reached ``started()`` (its first output)."""


class DestinationServer(Agent):
    """Serve the local ``agent`` on the bus as destination ``name``, for ``RemoteAgent`` proxies.

    Register it with the runtime of the process that hosts the agent. When it stops it
    lets the answers in flight finish for up to ``shutdown_grace_s``, then cancels the
    rest (each reports its end to its proxy: the runtime still publishes and reads).
    It publishes a participant's routing aid when it changes: it re-reads the aids it
    handed out after each request and answer of that participant, every
    ``aid_check_s``, and at once on ``routing_aid_changed()``.
    """

    def __init__(
        self,
        name: str,
        agent: RoutableAgent,
        *,
        shutdown_grace_s: float = 0.0,
        aid_check_s: float = 0.5,
    ) -> None:
        check_routable("DestinationServer", name, agent)
        if not shutdown_grace_s >= 0:
            raise ValueError("DestinationServer.shutdown_grace_s: must be >= 0")
        if not aid_check_s > 0:
            raise ValueError("DestinationServer.aid_check_s: must be positive")
        self.shutdown_grace_s = shutdown_grace_s
        self.aid_check_s = aid_check_s
        self.destination = name
        self.topics = DestinationTopics.of(name)
        self.agent = agent
        self._calls: dict[str, _Call] = {}
        self._finished_calls: dict[str, None] = {}
        self._aids: OrderedDict[str, tuple[int, RoutingAid]] = OrderedDict()
        """The aid last handed out per participant, with its version; least recent first."""
        self._version = 0
        self._stale: set[str] = set()
        """Participants whose aid may have changed: re-read on the next check."""
        self._check = asyncio.Event()
        self._checker: asyncio.Task[None] | None = None
        self.aids_published = 0
        self.protocol_refusals = 0
        """Routing-aid asks refused for another protocol version (each answered with an error)."""
        self._log = get_logger(actor=f"serve.{name}")
        self._warnings = AggregatedWarnings(self._log)

    def handlers(self) -> Handlers:
        topics = self.topics
        return {
            topics.aid: self._on_aid,
            topics.turn: self._on_turn,
            topics.release: self._on_release,
            topics.left: self._on_left,
            topics.signal: self._on_signal,
            topics.status: self._on_status,
        }

    def gauges(self) -> dict[str, float]:
        return {
            f"serve.{self.destination}.aids_published": self.aids_published,
            f"serve.{self.destination}.protocol_refusals": self.protocol_refusals,
        }

    async def on_start(self) -> None:
        self._checker = asyncio.create_task(self._check_aids(), name=f"{self.name}-aids")

    async def on_stop(self) -> None:
        if self._checker is not None:
            self._checker.cancel()
            await asyncio.gather(self._checker, return_exceptions=True)
        tasks = [call.task for call in self._calls.values() if call.task is not None]
        if tasks and self.shutdown_grace_s > 0:
            await asyncio.wait(tasks, timeout=self.shutdown_grace_s)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def routing_aid_changed(self, participant_id: str | None = None) -> None:
        """The agent's routing aid for ``participant_id`` (None: any participant) may have
        changed: re-read it now and publish it if it did."""
        self._stale.update(self._aids if participant_id is None else (participant_id,))
        self._check.set()

    # -- routing aids ---------------------------------------------------------------------

    async def _on_aid(self, request: RouteAidAsk, ctx: RuntimeContext) -> Any:
        if request.protocol != ROUTE_PROTOCOL:  # a peer's mistake, not this actor's fault
            error = (
                f"RouteAidAsk.protocol: destination {self.destination!r} speaks route "
                f"protocol {ROUTE_PROTOCOL}, the asking proxy {request.protocol}: run the "
                "same xrmq version on both sides"
            )
            self.protocol_refusals += 1
            self._warnings.warn(
                "serve.protocol_refused",
                self.topics.aid.name,
                ctx.metadata.sender,
                protocol=request.protocol,
            )
            ctx.runtime.reply(ctx.metadata, None, error=error)
            return DEFERRED_REPLY
        pid = _participant(ctx)
        version, aid = self._remember(pid, await routing_aid_of(self.agent, pid))
        return self._aids_message(version, aid)

    def _remember(self, participant_id: str, aid: RoutingAid) -> tuple[int, RoutingAid]:
        """Record the aid handed out for the participant; a new version if it changed."""
        known = self._aids.get(participant_id)
        if known is None or known[1] != aid:
            self._version += 1
            known = self._aids[participant_id] = (self._version, aid)
        self._aids.move_to_end(participant_id)
        if len(self._aids) > AIDS_KEPT:
            self._aids.popitem(last=False)
        return known

    def _aids_message(self, version: int, aid: RoutingAid) -> RouteAids:
        runtime = self.runtime
        assert runtime is not None  # a handler runs only in a running runtime
        return RouteAids(ROUTE_PROTOCOL, version, aid, runtime.name, runtime.epoch)

    def _recheck(self, participant_id: str) -> None:
        if participant_id in self._aids:
            self._stale.add(participant_id)
            self._check.set()

    async def _check_aids(self) -> None:
        """Re-read the aids handed out (the stale ones at once, all every ``aid_check_s``)
        and publish each that changed."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.call_later(self.aid_check_s, self.routing_aid_changed)
            try:
                await self._check.wait()
            finally:
                due.cancel()
            self._check.clear()
            stale, self._stale = self._stale, set()
            for pid in stale:
                if pid not in self._aids:
                    continue  # left, or evicted
                try:
                    aid = await routing_aid_of(self.agent, pid)
                except Exception as error:
                    self._log.warning(
                        "serve.routing_aid_failed", participant=pid, error=repr(error)
                    )
                    aid = RoutingAid("unavailable", eligible=False)
                if pid not in self._aids or self._aids[pid][1] == aid:
                    continue
                version, aid = self._remember(pid, aid)
                runtime = self.runtime
                if runtime is None or not runtime.running:
                    return
                runtime.send(
                    self.topics.aids,
                    self._aids_message(version, aid),
                    participant_id=pid,
                    source=self.name,
                )
                self.aids_published += 1

    # -- requests -------------------------------------------------------------------------

    async def _on_turn(self, request: RouteTurn, ctx: RuntimeContext) -> RouteOutcome:
        """Admit (unless a fallback turn) and, on accept, start the answer at once."""
        if request.call_id in self._calls:
            raise ValueError(f"RouteTurn.call_id: {request.call_id!r} is already running")
        turn = request.turn
        runtime = self.runtime
        assert runtime is not None  # a handler runs only in a running runtime
        admission: Admission | None = None
        if request.admit:
            with routed_turn(
                RoutingTurnContext(
                    request.route,
                    turn.participant_id,
                    turn.turn_id,
                    request.focused,
                    started_work=request.hold,
                )
            ):
                admission = await self.agent.admit(turn, focused=request.focused)
            if not isinstance(admission, Admission):
                raise ValueError(f"admit: returned {type(admission).__name__}, not an Admission")
            if admission.disposition != "accept":
                self._recheck(turn.participant_id)
                return RouteOutcome(runtime.name, runtime.epoch, admission)
        held = request.hold or (
            admission is not None and (admission.focus or bool(admission.text.strip()))
        )
        events = Topic(request.events, RouteEvent)
        call = self._calls[request.call_id] = _Call(held)
        call.task = asyncio.create_task(
            self._run(request, events, call), name=f"{self.name}-answer-{request.call_id}"
        )
        call.task.add_done_callback(lambda task: self._finished(request, events, call, task))
        return RouteOutcome(runtime.name, runtime.epoch, admission, answering=True, held=held)

    async def _on_release(self, request: RouteRequest, ctx: RuntimeContext) -> None:
        pid = _participant(ctx)
        await self.agent.release(pid)
        self._recheck(pid)

    async def _on_left(self, request: RouteRequest, ctx: RuntimeContext) -> None:
        pid = _participant(ctx)
        await self.agent.participant_left(pid)
        self._aids.pop(pid, None)

    async def _on_status(self, request: RouteCallStatus, ctx: RuntimeContext) -> CallState:
        if request.call_id in self._calls:
            return "running"
        return "finished" if request.call_id in self._finished_calls else "unknown"

    async def _on_signal(self, signal: RouteSignal, ctx: RuntimeContext) -> None:
        call = self._calls.get(signal.call_id)
        if call is None:
            return
        if signal.kind == "cancel":
            if call.task is not None:
                call.task.cancel()
        elif not call.proceed.done():
            call.proceed.set_result(None)

    async def _run(
        self, request: RouteTurn, events: Topic[RouteEvent], call: _Call
    ) -> DestinationResult:
        turn = request.turn
        pid = turn.participant_id

        async def started() -> None:
            call.began = True
            if call.held:
                runtime = self.runtime
                assert runtime is not None
                runtime.send(
                    events,
                    RouteEvent(request.call_id, "started"),
                    participant_id=pid,
                    source=self.name,
                )
                await call.proceed

        with routed_turn(
            RoutingTurnContext(
                request.route, pid, turn.turn_id, request.focused, started_work=request.hold
            )
        ):
            return await self.agent.answer(turn, started=started)

    def _finished(
        self,
        request: RouteTurn,
        events: Topic[RouteEvent],
        call: _Call,
        task: asyncio.Task[DestinationResult],
    ) -> None:
        """Report how the call ended; the destination has finished, so its final frame is out."""
        del self._calls[request.call_id]
        self._finished_calls[request.call_id] = None
        if len(self._finished_calls) > _FINISHED_KEPT:
            del self._finished_calls[next(iter(self._finished_calls))]
        log = self._log.bind(participant=request.turn.participant_id, turn=request.turn.turn_id)
        began = call.began
        if task.cancelled():
            event = RouteEvent(request.call_id, "cancelled", began=began)
        elif (error := task.exception()) is not None:
            log.error("serve.answer_failed", error=repr(error))
            event = RouteEvent(
                request.call_id, "failed", error=describe_failure(error), began=began
            )
        elif not isinstance(task.result(), DestinationResult):
            event = RouteEvent(
                request.call_id,
                "failed",
                began=began,
                error=f"InvalidResult: answer returned {type(task.result()).__name__}",
            )
        else:
            event = RouteEvent(request.call_id, "done", result=task.result(), began=began)
        if self.runtime is not None and self.runtime.running:
            self.runtime.send(
                events, event, participant_id=request.turn.participant_id, source=self.name
            )
            self._recheck(request.turn.participant_id)
        else:
            log.warning("serve.unreported_end", call=request.call_id, kind=event.kind)


def _participant(ctx: RuntimeContext) -> str:
    if ctx.participant_id is None:
        raise ValueError("RouteRequest: the envelope must name the participant")
    return ctx.participant_id


def serve(
    name: str, agent: RoutableAgent, *, shutdown_grace_s: float = 0.0, aid_check_s: float = 0.5
) -> DestinationServer:
    """Expose ``agent`` as destination ``name``; register the result with the agent's runtime."""
    return DestinationServer(
        name, agent, shutdown_grace_s=shutdown_grace_s, aid_check_s=aid_check_s
    )
