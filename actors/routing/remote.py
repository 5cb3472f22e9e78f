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
route.NAME.answer   RouteAnswer     ask      RouteAccepted once the answer task runs
route.NAME.status   RouteCallStatus ask      CallState of one answer call
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

A destination that dies costs its own turn only. With ``dead_after_s`` the proxy
watches the runtime that accepted the call (``RouteAccepted`` names it and its
epoch): any message from it (its ``RuntimeMetrics`` heartbeat, the call's events,
its reply fragments) shows it alive. Silent for ``dead_after_s``, or replaced by a
new incarnation (a heartbeat with a newer epoch), it is dead: the call fails at
once with ``DestinationDied`` (a cancelled call stops draining), and with
``output_topic`` the proxy publishes the final frame of every reply stream the call
had open, under the destination's source, so the renderer closes it now instead of
waiting out its idle timeout. Until that runtime heartbeats again (a new incarnation,
once its supervisor restarted it; or the same one, if it was only silent), the proxy's
next requests wait for it (at most ``timeout_s``) instead of being sent to nobody, so
the next turn is answered as soon as it is back.

Without ``dead_after_s`` (no heartbeats to watch), the proxy instead asks ``status``
after every ``liveness_s`` of silence while it waits for a call's events: a destination that
restarted mid-turn answers ``unknown``
and one that is gone does not answer, and either fails the call at once like a death
(``DestinationDied``, its cause naming ``DestinationLost``) instead of leaving the turn
open.

Failures travel as ``"<Kind>: <message>"`` (the destination's exception type and
text): the proxy raises ``RemoteAnswerError`` whose ``cause`` is that string, which the
router reports in the turn's ``TurnEnded``.

Asks time out after ``timeout_s``: a routing aid that cannot be had makes the
destination ineligible, a failed admission counts as a decline, an unanswered ``answer``
is a failure before the first chunk (the router reports it). The server runs ``admit``,
``release`` and ``participant_left`` in its handler (one at a time), and each answer
on a task it owns and cancels on stop.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal, cast

from xrmq.actors.runtime import (
    Agent,
    Handler,
    Handlers,
    RuntimeClosedError,
    RuntimeContext,
    get_logger,
)
from xrmq.schemas import (
    Admission,
    AgentTurn,
    DestinationResult,
    ResponseOutput,
    RoutingAid,
    RuntimeMetrics,
)
from xrmq.schemas._validation import check_name
from xrmq.schemas.routing import (
    CallState,
    RouteAccepted,
    RouteAdmit,
    RouteAnswer,
    RouteCallStatus,
    RouteEvent,
    RouteRequest,
    RouteSignal,
)
from xrmq.topics import METRICS_TOPIC, Topic

from .agent import (
    RoutableAgent,
    RoutingTurnContext,
    Started,
    check_routable,
    current_turn_context,
    routed_turn,
    routing_aid_of,
)
from .failure import describe_failure

_FINISHED_KEPT = 256
"""How many ended call ids a server remembers, to answer ``finished`` to a late status ask."""


class RemoteAnswerError(RuntimeError):
    """A remote destination's answer failed, or its server did not accept or lost the call.

    ``str(error)`` reads ``remote <name>: <cause>``; ``cause`` is ``"<Kind>: <message>"``
    (the remote exception's type and text, or ``DestinationLost``/``DestinationUnreachable``
    when the destination itself failed the call).
    """

    def __init__(self, name: str, cause: str) -> None:
        super().__init__(f"remote {name}: {cause}")
        self.cause = cause


class DestinationDied(RemoteAnswerError):
    """The runtime running a remote answer died: silent for ``dead_after_s``, or restarted."""


_STREAMS_PER_CALL = 16
"""Open reply streams remembered per call (a conversation opens one)."""
_CHECKS_PER_DEADLINE = 8
"""How often, per ``dead_after_s``, a waiting call checks its destination is alive."""


class _ProxyCall:
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
        self.streams: dict[str, str] = {}
        """Reply streams the call has open: response id -> the source publishing it."""


@dataclass(frozen=True, slots=True)
class DestinationTopics:
    """The request topics of one remote destination."""

    aid: Topic[RouteRequest]
    admit: Topic[RouteAdmit]
    release: Topic[RouteRequest]
    left: Topic[RouteRequest]
    answer: Topic[RouteAnswer]
    signal: Topic[RouteSignal]
    status: Topic[RouteCallStatus]

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
            status=Topic(prefix + "status", RouteCallStatus),
        )


class RemoteAgent(Agent):
    """A ``RoutableAgent`` proxy for the destination a ``DestinationServer`` serves as ``name``.

    Register it with the router's runtime (any actor name) before the runtime starts;
    it receives its answer calls' events there. ``timeout_s`` bounds every ask;
    ``drain_timeout_s`` bounds the wait for a cancelled answer to end. ``dead_after_s``
    (None: never) and ``output_topic``: see "A destination that dies" in the module
    docstring; the destination's runtime must publish heartbeats (``metrics_interval``
    shorter than ``dead_after_s``), as every process of an edge box does.
    """

    def __init__(
        self,
        name: str,
        *,
        timeout_s: float = 5.0,
        drain_timeout_s: float = 5.0,
        dead_after_s: float | None = None,
        output_topic: Topic[ResponseOutput] | None = None,
        liveness_s: float = 1.0,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError("RemoteAgent.timeout_s: must be positive")
        if not drain_timeout_s > 0:
            raise ValueError("RemoteAgent.drain_timeout_s: must be positive")
        if dead_after_s is not None and not dead_after_s > 0:
            raise ValueError("RemoteAgent.dead_after_s: must be positive (or None)")
        if output_topic is not None and not (
            isinstance(output_topic, Topic) and output_topic.message_type is ResponseOutput
        ):
            raise ValueError("RemoteAgent.output_topic: must be a Topic carrying ResponseOutput")
        if not liveness_s > 0:
            raise ValueError("RemoteAgent.liveness_s: must be positive")
        self.dead_after_s = dead_after_s
        self.output_topic = output_topic
        self.liveness_s = liveness_s
        self.remote_name = name
        self.topics = DestinationTopics.of(name)
        self.events = Topic(f"route.{name}.events.{uuid.uuid4().hex}", RouteEvent)
        """This proxy's own topic for its answer calls' events."""
        self.timeout_s = timeout_s
        self.drain_timeout_s = drain_timeout_s
        self._calls: dict[str, _ProxyCall] = {}
        self._by_turn: dict[tuple[str, str], _ProxyCall] = {}
        """The same calls by (participant, turn id): what their reply fragments carry."""
        self._dead: tuple[str, int] | None = None
        """The (runtime, epoch) found dead, until that runtime heartbeats again."""
        self._revived = asyncio.Event()
        self._log = get_logger(actor=f"remote.{name}")

    def handlers(self) -> Handlers:
        topics: dict[Topic, Handler] = {self.events: self._on_event}
        if self.dead_after_s is not None:
            topics[METRICS_TOPIC] = self._on_heartbeat
            if self.output_topic is not None:
                topics[self.output_topic] = self._on_output
        return topics

    async def routing_aid(self, participant_id: str) -> RoutingAid:
        return await self._ask(self.topics.aid, RouteRequest(), participant_id, RoutingAid)

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission:
        return await self._ask(
            self.topics.admit,
            RouteAdmit(turn, focused, self._route()),
            turn.participant_id,
            Admission,
        )

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
        call = _ProxyCall(pid, turn.turn_id)
        self._calls[call_id] = self._by_turn[pid, turn.turn_id] = call
        request = RouteAnswer(
            call_id, turn, self._route(), self.events.name, routed.focused if routed else False
        )
        try:
            if not await self._revival():
                raise RemoteAnswerError(
                    self.remote_name,
                    f"DestinationUnreachable: the answer was not accepted: {self._dead_reason()}",
                )
            try:
                accepted = await runtime.ask(
                    self.topics.answer,
                    request,
                    reply_type=RouteAccepted,
                    participant_id=pid,
                    source=self.name,
                    timeout=self.timeout_s,
                )
            except TimeoutError as error:
                self._signal(call_id, "cancel", pid)  # in case the request arrives late
                raise RemoteAnswerError(
                    self.remote_name,
                    f"DestinationUnreachable: the answer was not accepted: {error}",
                ) from None
            except asyncio.CancelledError:
                await self._cancel(call_id, call)
                raise
            call.runtime, call.epoch = accepted.runtime, accepted.epoch
            call.seen_at = asyncio.get_running_loop().time()  # the acceptance is a sign of life
            try:
                while True:
                    deadline = None  # heartbeats watch the destination (dead_after_s)
                    if self.dead_after_s is None:
                        deadline = asyncio.get_running_loop().time() + self.liveness_s
                    event = await self._next_event(call, deadline)
                    if event is None:  # silent for liveness_s: does it still run the call?
                        await self._check_alive(call_id, call)
                        continue
                    if event.kind == "started":
                        await started()
                        self._signal(call_id, "proceed", pid)
                    elif event.kind == "done":
                        return event.result or DestinationResult()
                    else:
                        raise RemoteAnswerError(
                            self.remote_name, event.error or "Cancelled: the answer was cancelled"
                        )
            except DestinationDied:
                self._buried(call)
                raise
            except (asyncio.CancelledError, Exception) as error:
                if not isinstance(error, RemoteAnswerError):
                    await self._cancel(call_id, call)
                raise
        finally:
            del self._calls[call_id]
            if self._by_turn.get((pid, turn.turn_id)) is call:
                del self._by_turn[pid, turn.turn_id]

    async def _check_alive(self, call_id: str, call: _ProxyCall) -> None:
        """``DestinationDied`` (``DestinationLost``) unless the destination still runs the call."""
        try:
            state = await self._ask(
                self.topics.status, RouteCallStatus(call_id), call.participant_id, CallState
            )
        except TimeoutError:
            state = None
        if call.events or state in ("running", "finished"):
            return  # an event arrived meanwhile, or it is still at work
        if state == "unknown":
            raise DestinationDied(
                self.remote_name,
                "DestinationLost: the destination no longer "
                "knows this answer (it restarted mid-turn)",
            )
        raise DestinationDied(
            self.remote_name,
            "DestinationLost: the destination stopped "
            f"answering (no reply to a status check within {self.timeout_s:g}s)",
        )

    async def _on_event(self, event: RouteEvent, ctx: RuntimeContext) -> None:
        call = self._calls.get(event.call_id)
        if call is None:
            self._log.debug("remote.event_unknown_call", call=event.call_id, kind=event.kind)
            return
        self._heard(call, ctx)
        call.events.append(event)
        call.arrived.set()

    async def _on_heartbeat(self, metrics: RuntimeMetrics, ctx: RuntimeContext) -> None:
        """A runtime's heartbeat: its calls' destination is alive, or restarted (a newer epoch)."""
        sender, epoch = ctx.metadata.sender, ctx.metadata.epoch
        if self._dead is not None and self._dead[0] == sender and epoch >= self._dead[1]:
            self._dead = None
            self._revived.set()
        for call in self._calls.values():
            if call.runtime != sender:
                continue
            if epoch == call.epoch:
                call.seen_at = asyncio.get_running_loop().time()
            elif epoch > call.epoch and call.died is None:
                call.died = f"its process {sender!r} was restarted (a new incarnation)"
                call.replaced = True
                call.arrived.set()

    async def _on_output(self, message: ResponseOutput, ctx: RuntimeContext) -> None:
        """Follow the reply streams of the calls in flight, to close them if their runtime dies."""
        if message.response_id is None or ctx.participant_id is None:
            return
        call = self._by_turn.get((ctx.participant_id, message.request_id or ""))
        if call is None or call.runtime != ctx.metadata.sender:
            return
        self._heard(call, ctx)
        if message.final:
            call.streams.pop(message.response_id, None)
        elif len(call.streams) < _STREAMS_PER_CALL:
            call.streams.setdefault(message.response_id, ctx.metadata.source)

    def _heard(self, call: _ProxyCall, ctx: RuntimeContext) -> None:
        if ctx.metadata.sender == call.runtime and ctx.metadata.epoch == call.epoch:
            call.seen_at = asyncio.get_running_loop().time()

    async def _next_event(
        self, call: _ProxyCall, deadline: float | None = None
    ) -> RouteEvent | None:
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
                    raise DestinationDied(self.remote_name, f"DestinationLost: {call.died}")
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

    async def _cancel(self, call_id: str, call: _ProxyCall) -> None:
        """Cancel a call and wait (bounded) until the remote answer ended, or its runtime died."""
        self._signal(call_id, "cancel", call.participant_id)
        deadline = asyncio.get_running_loop().time() + self.drain_timeout_s
        while True:
            try:
                event = await self._next_event(call, deadline)
            except DestinationDied:
                self._buried(call)
                return
            if event is None:
                self._log.warning(
                    "remote.drain_timeout", participant=call.participant_id, call=call_id
                )
                return
            if event.kind != "started":
                return

    def _buried(self, call: _ProxyCall) -> None:
        """The call's runtime died: remember it, and publish the final frame of each reply
        stream it left open."""
        if call.runtime is not None and not call.replaced:  # replaced: the new one is up already
            self._dead = (call.runtime, call.epoch)
            self._revived.clear()
        self._log.warning(
            "remote.destination_died",
            participant=call.participant_id,
            turn=call.turn_id,
            reason=call.died,
            streams_closed=len(call.streams),
        )
        runtime = self.runtime
        if self.output_topic is None or runtime is None or not runtime.running:
            return
        for response_id, source in call.streams.items():
            runtime.send(
                self.output_topic,
                ResponseOutput(
                    kind="reply", request_id=call.turn_id, response_id=response_id, final=True
                ),
                participant_id=call.participant_id,
                source=source,
            )
        call.streams.clear()

    def _signal(
        self, call_id: str, kind: Literal["proceed", "cancel"], participant_id: str
    ) -> None:
        runtime = self.runtime
        if runtime is not None and runtime.running:
            runtime.send(
                self.topics.signal,
                RouteSignal(call_id, kind),
                participant_id=participant_id,
                source=self.name,
            )

    async def _revival(self) -> bool:
        """Wait (at most ``timeout_s``) for a dead destination to heartbeat again; False if not."""
        if self._dead is None:
            return True
        try:
            await asyncio.wait_for(self._revived.wait(), self.timeout_s)
        except TimeoutError:
            return False
        return True

    def _dead_reason(self) -> str:
        runtime = self._dead[0] if self._dead is not None else "?"
        return f"its process {runtime!r} died and was not back within {self.timeout_s:g}s"

    async def _ask(self, topic: Topic, message: Any, participant_id: str, reply_type: Any) -> Any:
        if not await self._revival():
            raise TimeoutError(f"remote {self.remote_name}: {self._dead_reason()}")
        return await self._runtime().ask(
            topic,
            message,
            reply_type=reply_type,
            participant_id=participant_id,
            source=self.name,
            timeout=self.timeout_s,
        )

    def _route(self) -> str:
        routed = current_turn_context()
        return routed.route if routed is not None else self.remote_name

    def _runtime(self) -> Any:
        if self.runtime is None or not self.runtime.running:
            raise RuntimeClosedError(
                f"RemoteAgent({self.remote_name!r}): register it with the router's runtime and "
                "start it"
            )
        return self.runtime


class _Call:
    __slots__ = ("proceed", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[DestinationResult] | None = None
        self.proceed: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class DestinationServer(Agent):
    """Serve the local ``agent`` on the bus as destination ``name``, for ``RemoteAgent`` proxies.

    Register it with the runtime of the process that hosts the agent. When it stops it
    lets the answers in flight finish for up to ``shutdown_grace_s``, then cancels the
    rest (each reports its end to its proxy: the runtime still publishes and reads).
    """

    def __init__(self, name: str, agent: RoutableAgent, *, shutdown_grace_s: float = 0.0) -> None:
        check_routable("DestinationServer", name, agent)
        if not shutdown_grace_s >= 0:
            raise ValueError("DestinationServer.shutdown_grace_s: must be >= 0")
        self.shutdown_grace_s = shutdown_grace_s
        self.destination = name
        self.topics = DestinationTopics.of(name)
        self.agent = agent
        self._calls: dict[str, _Call] = {}
        self._finished_calls: dict[str, None] = {}
        self._log = get_logger(actor=f"serve.{name}")

    def handlers(self) -> Handlers:
        topics = self.topics
        return {
            topics.aid: self._on_aid,
            topics.admit: self._on_admit,
            topics.release: self._on_release,
            topics.left: self._on_left,
            topics.answer: self._on_answer,
            topics.signal: self._on_signal,
            topics.status: self._on_status,
        }

    async def on_stop(self) -> None:
        tasks = [call.task for call in self._calls.values() if call.task is not None]
        if tasks and self.shutdown_grace_s > 0:
            await asyncio.wait(tasks, timeout=self.shutdown_grace_s)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _on_aid(self, request: RouteRequest, ctx: RuntimeContext) -> RoutingAid:
        return await routing_aid_of(self.agent, _participant(ctx))

    async def _on_admit(self, request: RouteAdmit, ctx: RuntimeContext) -> Admission:
        turn = request.turn
        with routed_turn(
            RoutingTurnContext(request.route, turn.participant_id, turn.turn_id, request.focused)
        ):
            return await self.agent.admit(turn, focused=request.focused)

    async def _on_release(self, request: RouteRequest, ctx: RuntimeContext) -> None:
        await self.agent.release(_participant(ctx))

    async def _on_left(self, request: RouteRequest, ctx: RuntimeContext) -> None:
        await self.agent.participant_left(_participant(ctx))

    async def _on_answer(self, request: RouteAnswer, ctx: RuntimeContext) -> RouteAccepted:
        if request.call_id in self._calls:
            raise ValueError(f"RouteAnswer.call_id: {request.call_id!r} is already running")
        events = Topic(request.events, RouteEvent)
        call = self._calls[request.call_id] = _Call()
        call.task = asyncio.create_task(
            self._run(request, events, call), name=f"{self.name}-answer-{request.call_id}"
        )
        call.task.add_done_callback(lambda task: self._finished(request, events, task))
        runtime = self.runtime
        assert runtime is not None  # a handler runs on its runtime
        return RouteAccepted(runtime.name, runtime.epoch)

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
        self, request: RouteAnswer, events: Topic[RouteEvent], call: _Call
    ) -> DestinationResult:
        turn = request.turn
        pid = turn.participant_id

        runtime = self.runtime
        assert runtime is not None  # a handler runs on its runtime

        async def started() -> None:
            runtime.send(
                events, RouteEvent(request.call_id, "started"), participant_id=pid, source=self.name
            )
            await call.proceed

        with routed_turn(RoutingTurnContext(request.route, pid, turn.turn_id, request.focused)):
            return await self.agent.answer(turn, started=started)

    def _finished(
        self, request: RouteAnswer, events: Topic[RouteEvent], task: asyncio.Task[DestinationResult]
    ) -> None:
        """Report how the call ended; the destination has finished, so its final frame is out."""
        del self._calls[request.call_id]
        self._finished_calls[request.call_id] = None
        if len(self._finished_calls) > _FINISHED_KEPT:
            del self._finished_calls[next(iter(self._finished_calls))]
        log = self._log.bind(participant=request.turn.participant_id, turn=request.turn.turn_id)
        if task.cancelled():
            event = RouteEvent(request.call_id, "cancelled")
        elif (error := task.exception()) is not None:
            log.error("serve.answer_failed", error=repr(error))
            event = RouteEvent(request.call_id, "failed", error=describe_failure(error))
        elif not isinstance(task.result(), DestinationResult):
            event = RouteEvent(
                request.call_id,
                "failed",
                error=f"InvalidResult: answer returned {type(task.result()).__name__}",
            )
        else:
            event = RouteEvent(request.call_id, "done", result=task.result())
        if self.runtime is not None and self.runtime.running:
            self.runtime.send(
                events, event, participant_id=request.turn.participant_id, source=self.name
            )
        else:
            log.warning("serve.unreported_end", call=request.call_id, kind=event.kind)


def _participant(ctx: RuntimeContext) -> str:
    if ctx.participant_id is None:
        raise ValueError("RouteRequest: the envelope must name the participant")
    return ctx.participant_id


def remote(
    name: str,
    *,
    timeout_s: float = 5.0,
    drain_timeout_s: float = 5.0,
    dead_after_s: float | None = None,
    output_topic: Topic[ResponseOutput] | None = None,
    liveness_s: float = 1.0,
) -> RemoteAgent:
    """A proxy for destination ``name`` served in another process; register it with the router's
    runtime."""
    return RemoteAgent(
        name,
        timeout_s=timeout_s,
        drain_timeout_s=drain_timeout_s,
        dead_after_s=dead_after_s,
        output_topic=output_topic,
        liveness_s=liveness_s,
    )


def serve(name: str, agent: RoutableAgent, *, shutdown_grace_s: float = 0.0) -> DestinationServer:
    """Expose ``agent`` as destination ``name``; register the result with the agent's runtime."""
    return DestinationServer(name, agent, shutdown_grace_s=shutdown_grace_s)
