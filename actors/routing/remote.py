"""Location transparency: a destination in another process, reached over the bus.

``RemoteAgent`` (from ``remote(name)``) is a ``RoutableAgent`` proxy registered with the
router's runtime; ``DestinationServer`` (from ``serve(name, agent)``) is registered with
the destination's runtime and exposes a local ``RoutableAgent`` under ``name``. A router
given ``{"conversation": remote("conversation")}`` behaves as with the local agent:
same admissions, same published replies (source = the router's name for it), same
``started()`` order, cancellation and drain.

Protocol for destination NAME (schemas in ``xrmq.schemas.routing``; the participant is
in the envelope; "ask" is ``AgentRuntime.ask``, whose reply is the handler's result):

==================  ==============  =======  ==========================================
topic               payload         how      reply / meaning
==================  ==============  =======  ==========================================
route.NAME.aid      RouteRequest    ask      RoutingAid for the participant
route.NAME.admit    RouteAdmit      ask      Admission
route.NAME.release  RouteRequest    ask      None, after ``release()`` returned
route.NAME.left     RouteRequest    ask      None, after ``participant_left()`` returned
route.NAME.answer   RouteAnswer     ask      True once the answer task runs
route.NAME.signal   RouteSignal     publish  ``proceed`` / ``cancel`` one call
(RouteAnswer.events) RouteEvent     publish  ``started``, then one of ``done`` /
                                             ``failed`` / ``cancelled``
==================  ==============  =======  ==========================================

An answer call: the proxy asks ``answer`` with a fresh ``call_id`` and its own events
topic. When the destination awaits ``started()`` the server publishes ``started`` and
waits; the proxy awaits the router's ``started()`` and publishes ``proceed``; only then
does the destination publish its first chunk. So router text said before ``started()``
returned reaches every subscriber first: the broker forwards in causal order. The call
ends with ``done`` (the ``DestinationResult``), ``failed`` (the error text; the proxy
raises ``RemoteAnswerError``) or ``cancelled``, each published after the destination
finished, so after its final frame. When the router cancels the proxy's ``answer()``,
the proxy publishes ``cancel`` and waits up to ``drain_timeout_s`` for the call to end
before it re-raises: the remote answer is cancelled and drained like a local one.

Asks time out after ``timeout_s``: a routing aid that cannot be had makes the
destination ineligible, a failed admission counts as a decline, an unanswered ``answer``
is a failure before the first chunk (the router reports it). The server runs ``admit``,
``release`` and ``participant_left`` in its handler (one at a time), and each answer
on a task it owns and cancels on stop.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from xrmq.actors.runtime import Agent, RuntimeClosedError, RuntimeContext, get_logger
from xrmq.actors.runtime.agent import Handlers
from xrmq.schemas import Admission, AgentTurn, DestinationResult, RoutingAid
from xrmq.schemas._validation import check_name
from xrmq.schemas.routing import RouteAdmit, RouteAnswer, RouteEvent, RouteRequest, RouteSignal
from xrmq.topics import Topic

from .agent import (
    RoutableAgent,
    RoutingTurnContext,
    Started,
    check_routable,
    current_turn_context,
    routed_turn,
    routing_aid_of,
)


class RemoteAnswerError(RuntimeError):
    """A remote destination's answer failed (the message names the remote error), or its
    server did not accept the call."""


@dataclass(frozen=True, slots=True)
class DestinationTopics:
    """The request topics of one remote destination."""

    aid: Topic[RouteRequest]
    admit: Topic[RouteAdmit]
    release: Topic[RouteRequest]
    left: Topic[RouteRequest]
    answer: Topic[RouteAnswer]
    signal: Topic[RouteSignal]

    @classmethod
    def of(cls, name: str) -> DestinationTopics:
        check_name(name, "name")
        prefix = f"route.{name}."
        return cls(
            aid=Topic(prefix + "aid", RouteRequest),
            admit=Topic(prefix + "admit", RouteAdmit),
            release=Topic(prefix + "release", RouteRequest),
            left=Topic(prefix + "left", RouteRequest),
            answer=Topic(prefix + "answer", RouteAnswer),
            signal=Topic(prefix + "signal", RouteSignal),
        )


class RemoteAgent(Agent):
    """A ``RoutableAgent`` proxy for the destination a ``DestinationServer`` serves as ``name``.

    Register it with the router's runtime (any actor name) before the runtime starts;
    it receives its answer calls' events there. ``timeout_s`` bounds every ask;
    ``drain_timeout_s`` bounds the wait for a cancelled answer to end.
    """

    def __init__(self, name: str, *, timeout_s: float = 5.0, drain_timeout_s: float = 5.0) -> None:
        if not timeout_s > 0:
            raise ValueError("RemoteAgent.timeout_s: must be positive")
        if not drain_timeout_s > 0:
            raise ValueError("RemoteAgent.drain_timeout_s: must be positive")
        self.remote_name = name
        self.topics = DestinationTopics.of(name)
        self.events = Topic(f"route.{name}.events.{uuid.uuid4().hex}", RouteEvent)
        """This proxy's own topic for its answer calls' events."""
        self.timeout_s = timeout_s
        self.drain_timeout_s = drain_timeout_s
        self._calls: dict[str, asyncio.Queue[RouteEvent]] = {}
        self._log = get_logger(actor=f"remote.{name}")

    def handlers(self) -> Handlers:
        return {self.events: self._on_event}

    async def routing_aid(self, participant_id: str) -> RoutingAid:
        return await self._ask(self.topics.aid, RouteRequest(), participant_id, RoutingAid)

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission:
        return await self._ask(self.topics.admit, RouteAdmit(turn, focused, self._route()), turn.participant_id, Admission)

    async def release(self, participant_id: str) -> None:
        await self._ask(self.topics.release, RouteRequest(), participant_id, Any)

    async def participant_left(self, participant_id: str) -> None:
        await self._ask(self.topics.left, RouteRequest(), participant_id, Any)

    async def answer(self, turn: AgentTurn, *, started: Started) -> DestinationResult:
        """Run the answer remotely; see the module docstring for the exchange."""
        runtime = self._runtime()
        pid = turn.participant_id
        routed = current_turn_context()
        call_id = uuid.uuid4().hex
        events: asyncio.Queue[RouteEvent] = asyncio.Queue()
        self._calls[call_id] = events
        request = RouteAnswer(call_id, turn, self._route(), self.events.name, routed.focused if routed else False)
        try:
            try:
                await runtime.ask(self.topics.answer, request, reply_type=bool, participant_id=pid, source=self.name,
                                  timeout=self.timeout_s)
            except TimeoutError as error:
                self._signal(call_id, "cancel", pid)  # in case the request arrives late
                raise RemoteAnswerError(f"remote {self.remote_name}: the answer was not accepted: {error}") from None
            except asyncio.CancelledError:
                await self._cancel(call_id, events, pid)
                raise
            try:
                while True:
                    event = await events.get()
                    if event.kind == "started":
                        await started()
                        self._signal(call_id, "proceed", pid)
                    elif event.kind == "done":
                        return event.result or DestinationResult()
                    else:
                        raise RemoteAnswerError(f"remote {self.remote_name}: {event.error or 'the answer was cancelled'}")
            except (asyncio.CancelledError, Exception) as error:
                if not isinstance(error, RemoteAnswerError):
                    await self._cancel(call_id, events, pid)
                raise
        finally:
            del self._calls[call_id]

    async def _on_event(self, event: RouteEvent, ctx: RuntimeContext) -> None:
        events = self._calls.get(event.call_id)
        if events is None:
            self._log.debug("remote.event_unknown_call", call=event.call_id, kind=event.kind)
            return
        events.put_nowait(event)

    async def _cancel(self, call_id: str, events: asyncio.Queue[RouteEvent], participant_id: str) -> None:
        """Cancel a call and wait (bounded) until the remote answer has ended."""
        self._signal(call_id, "cancel", participant_id)
        deadline = asyncio.get_running_loop().time() + self.drain_timeout_s
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                event = await asyncio.wait_for(events.get(), max(remaining, 0))
            except TimeoutError:
                self._log.warning("remote.drain_timeout", participant=participant_id, call=call_id)
                return
            if event.kind != "started":
                return

    def _signal(self, call_id: str, kind: str, participant_id: str) -> None:
        runtime = self.runtime
        if runtime is not None and runtime.running:
            runtime.send(self.topics.signal, RouteSignal(call_id, kind), participant_id=participant_id, source=self.name)

    async def _ask(self, topic: Topic, message: Any, participant_id: str, reply_type: Any) -> Any:
        return await self._runtime().ask(topic, message, reply_type=reply_type, participant_id=participant_id,
                                         source=self.name, timeout=self.timeout_s)

    def _route(self) -> str:
        routed = current_turn_context()
        return routed.route if routed is not None else self.remote_name

    def _runtime(self) -> Any:
        if self.runtime is None or not self.runtime.running:
            raise RuntimeClosedError(f"RemoteAgent({self.remote_name!r}): register it with the router's runtime and start it")
        return self.runtime


class _Call:
    __slots__ = ("task", "proceed")

    def __init__(self) -> None:
        self.task: asyncio.Task[DestinationResult] | None = None
        self.proceed: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class DestinationServer(Agent):
    """Serve the local ``agent`` on the bus as destination ``name``, for ``RemoteAgent`` proxies.

    Register it with the runtime of the process that hosts the agent.
    """

    def __init__(self, name: str, agent: RoutableAgent) -> None:
        check_routable("DestinationServer", name, agent)
        self.destination = name
        self.topics = DestinationTopics.of(name)
        self.agent = agent
        self._calls: dict[str, _Call] = {}
        self._log = get_logger(actor=f"serve.{name}")

    def handlers(self) -> Handlers:
        topics = self.topics
        return {topics.aid: self._on_aid, topics.admit: self._on_admit, topics.release: self._on_release,
                topics.left: self._on_left, topics.answer: self._on_answer, topics.signal: self._on_signal}

    async def on_stop(self) -> None:
        tasks = [call.task for call in self._calls.values() if call.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _on_aid(self, request: RouteRequest, ctx: RuntimeContext) -> RoutingAid:
        return await routing_aid_of(self.agent, _participant(ctx))

    async def _on_admit(self, request: RouteAdmit, ctx: RuntimeContext) -> Admission:
        turn = request.turn
        with routed_turn(RoutingTurnContext(request.route, turn.participant_id, turn.turn_id, request.focused)):
            return await self.agent.admit(turn, focused=request.focused)

    async def _on_release(self, request: RouteRequest, ctx: RuntimeContext) -> None:
        await self.agent.release(_participant(ctx))

    async def _on_left(self, request: RouteRequest, ctx: RuntimeContext) -> None:
        await self.agent.participant_left(_participant(ctx))

    async def _on_answer(self, request: RouteAnswer, ctx: RuntimeContext) -> bool:
        if request.call_id in self._calls:
            raise ValueError(f"RouteAnswer.call_id: {request.call_id!r} is already running")
        events = Topic(request.events, RouteEvent)
        call = self._calls[request.call_id] = _Call()
        call.task = asyncio.create_task(self._run(request, events, call), name=f"{self.name}-answer-{request.call_id}")
        call.task.add_done_callback(lambda task: self._finished(request, events, task))
        return True

    async def _on_signal(self, signal: RouteSignal, ctx: RuntimeContext) -> None:
        call = self._calls.get(signal.call_id)
        if call is None:
            return
        if signal.kind == "cancel":
            call.task.cancel()
        elif not call.proceed.done():
            call.proceed.set_result(None)

    async def _run(self, request: RouteAnswer, events: Topic[RouteEvent], call: _Call) -> DestinationResult:
        turn = request.turn
        pid = turn.participant_id

        async def started() -> None:
            self.runtime.send(events, RouteEvent(request.call_id, "started"), participant_id=pid, source=self.name)
            await call.proceed

        with routed_turn(RoutingTurnContext(request.route, pid, turn.turn_id, request.focused)):
            return await self.agent.answer(turn, started=started)

    def _finished(self, request: RouteAnswer, events: Topic[RouteEvent], task: asyncio.Task[DestinationResult]) -> None:
        """Report how the call ended; the destination has finished, so its final frame is out."""
        del self._calls[request.call_id]
        log = self._log.bind(participant=request.turn.participant_id, turn=request.turn.turn_id)
        if task.cancelled():
            event = RouteEvent(request.call_id, "cancelled")
        elif task.exception() is not None:
            log.error("serve.answer_failed", error=repr(task.exception()))
            event = RouteEvent(request.call_id, "failed", error=repr(task.exception()))
        elif not isinstance(task.result(), DestinationResult):
            event = RouteEvent(request.call_id, "failed", error=f"answer returned {type(task.result()).__name__}")
        else:
            event = RouteEvent(request.call_id, "done", result=task.result())
        if self.runtime is not None and self.runtime.running:
            self.runtime.send(events, event, participant_id=request.turn.participant_id, source=self.name)
        else:
            log.warning("serve.unreported_end", call=request.call_id, kind=event.kind)


def _participant(ctx: RuntimeContext) -> str:
    if ctx.participant_id is None:
        raise ValueError("RouteRequest: the envelope must name the participant")
    return ctx.participant_id


def remote(name: str, *, timeout_s: float = 5.0, drain_timeout_s: float = 5.0) -> RemoteAgent:
    """A proxy for destination ``name`` served in another process; register it with the router's runtime."""
    return RemoteAgent(name, timeout_s=timeout_s, drain_timeout_s=drain_timeout_s)


def serve(name: str, agent: RoutableAgent) -> DestinationServer:
    """Expose ``agent`` as destination ``name``; register the result with the agent's runtime."""
    return DestinationServer(name, agent)
