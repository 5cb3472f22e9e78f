"""The proxy side of the route protocol: a destination in another process, reached over the bus.

``RemoteAgent`` (from ``remote(name)``) is a ``RoutableAgent`` registered with the
router's runtime, for the destination a ``DestinationServer`` serves as ``name``
(``remote_server.py``). A router given ``{"conversation": remote("conversation")}``
behaves as with the local agent: same admissions, same published replies (source = the
router's name for it), same ``started()`` order, cancellation and drain.
``remote_protocol.py`` gives the exchange. The proxy keeps the newest routing aid per
participant, so a turn does not ask for it; ``admit()`` sends the whole turn, and the
router's ``answer()`` follows the call it started. Its ``DestinationLiveness``
(``remote_liveness.py``) watches the destination's runtime, so a destination that dies
fails its call at once; with ``output_topic`` the proxy then closes the reply streams
the call left open, so the renderer need not wait out its idle timeout.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

import msgspec

from xrmq.actors.runtime import (
    Agent,
    Handler,
    Handlers,
    RuntimeClosedError,
    RuntimeContext,
    get_logger,
)
from xrmq.actors.runtime.ratelimit import AggregatedWarnings
from xrmq.schemas import (
    Admission,
    AgentTurn,
    DestinationResult,
    ResponseOutput,
    RoutingAid,
    RuntimeMetrics,
)
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
from xrmq.topics import METRICS_TOPIC, Topic

from .destination import Started, current_turn_context
from .remote_liveness import DestinationLiveness, ProxyCall
from .remote_protocol import (
    AIDS_KEPT,
    DestinationDied,
    DestinationTopics,
    RemoteAnswerError,
    RemoteProtocolError,
)

_STREAMS_PER_CALL = 16
"""Open reply streams remembered per call (a conversation opens one)."""


@dataclass(frozen=True, slots=True)
class _Admitted:
    """A call ``admit()`` started, waiting for the router's ``answer()`` of the same turn."""

    call_id: str
    call: ProxyCall
    turn: AgentTurn
    held: bool


class RemoteAgent(Agent):
    """A ``RoutableAgent`` proxy for the destination a ``DestinationServer`` serves as ``name``.

    Register it with the router's runtime (any actor name) before the runtime starts;
    it receives its answer calls' events and the destination's routing aids there.
    ``timeout_s`` bounds every ask; ``drain_timeout_s`` bounds the wait for a cancelled
    answer to end. ``dead_after_s`` (None: never) and ``output_topic``: see "A
    destination that dies" in ``remote_protocol``; the destination's runtime must
    publish heartbeats (``metrics_interval`` shorter than ``dead_after_s``), as every
    process of an edge box does. A cached routing aid is used while the destination's
    runtime was heard from within ``dead_after_s`` (or, without, ``liveness_s``).
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
        self._calls: dict[str, ProxyCall] = {}
        self._by_turn: dict[tuple[str, str], ProxyCall] = {}
        """The same calls by (participant, turn id): what their reply fragments carry."""
        self._admitted: dict[str, _Admitted] = {}
        """By participant: the call its last ``admit()`` started, until ``answer()`` takes it."""
        self._aids: OrderedDict[str, RouteAids] = OrderedDict()
        """The newest routing aid per participant, least recently used first."""
        self.aid_asks = 0
        """Routing-aid asks sent (the cache missed or was stale)."""
        self.aids_ignored = 0
        """Published aids dropped: another protocol version, or no participant."""
        self._log = get_logger(actor=f"remote.{name}")
        self._warnings = AggregatedWarnings(self._log)
        self._liveness = DestinationLiveness(
            name,
            timeout_s=timeout_s,
            dead_after_s=dead_after_s,
            liveness_s=liveness_s,
            log=self._log,
        )

    def handlers(self) -> Handlers:
        topics: dict[Topic, Handler] = {
            self.events: self._on_event,
            self.topics.aids: self._on_aids,
        }
        if self.dead_after_s is not None:
            topics[METRICS_TOPIC] = self._on_heartbeat
            if self.output_topic is not None:
                topics[self.output_topic] = self._on_output
        return topics

    def gauges(self) -> dict[str, float]:
        return {
            f"remote.{self.remote_name}.aid_asks": self.aid_asks,
            f"remote.{self.remote_name}.aids_cached": len(self._aids),
            f"remote.{self.remote_name}.aids_ignored": self.aids_ignored,
        }

    # -- routing aids ---------------------------------------------------------------------

    async def routing_aid(self, participant_id: str) -> RoutingAid:
        """The destination's aid for the participant: cached while fresh, else asked."""
        cached = self._aids.get(participant_id)
        if cached is not None and self._liveness.fresh(cached):
            self._aids.move_to_end(participant_id)
            return cached.aid
        self.aid_asks += 1
        try:
            reply = await self._ask(
                self.topics.aid, RouteAidAsk(ROUTE_PROTOCOL), participant_id, RouteAids
            )
        except msgspec.ValidationError as error:
            raise RemoteProtocolError(
                f"remote {self.remote_name}: the destination's routing-aid reply is not route "
                f"protocol {ROUTE_PROTOCOL} ({error}): it runs an older xrmq; run the same "
                "version on both sides"
            ) from None
        self._check_protocol(reply)
        self._liveness.heard(reply.runtime, reply.epoch)
        self._keep_aid(participant_id, reply)
        return reply.aid

    def _keep_aid(self, participant_id: str, aids: RouteAids) -> None:
        """Keep ``aids`` unless the cache holds a newer one of the same runtime."""
        cached = self._aids.get(participant_id)
        if (
            cached is not None
            and cached.runtime == aids.runtime
            and ((cached.epoch, cached.version) > (aids.epoch, aids.version))
        ):
            return
        self._aids[participant_id] = aids
        self._aids.move_to_end(participant_id)
        if len(self._aids) > AIDS_KEPT:
            self._aids.popitem(last=False)

    def _check_protocol(self, aids: RouteAids) -> None:
        if aids.protocol != ROUTE_PROTOCOL:
            raise RemoteProtocolError(
                f"remote {self.remote_name}: the destination speaks route protocol "
                f"{aids.protocol}, this proxy {ROUTE_PROTOCOL}: run the same xrmq version on "
                "both sides"
            )

    async def _on_aids(self, aids: RouteAids, ctx: RuntimeContext) -> None:
        """A published aid: the participant's aid changed at the destination."""
        if ctx.participant_id is None or aids.protocol != ROUTE_PROTOCOL:
            self.aids_ignored += 1
            self._warnings.warn(
                "remote.aid_ignored",
                self.topics.aids.name,
                ctx.metadata.sender,
                protocol=aids.protocol,
            )
            return
        self._liveness.heard(aids.runtime, aids.epoch)
        self._keep_aid(ctx.participant_id, aids)

    # -- the other requests ---------------------------------------------------------------

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission:
        """Send the turn (``RouteTurn``); an accepted one is being answered already, and the
        router's ``answer()`` of this turn takes the call over."""
        runtime = self._runtime()
        pid = turn.participant_id
        self._abandon(pid)
        routed = current_turn_context()
        hold = routed is None or routed.started_work
        call_id, call = self._open_call(turn)
        request = RouteTurn(
            call_id, turn, self._route(), self.events.name, focused, admit=True, hold=hold
        )
        try:
            outcome = await self._send_turn(runtime, request, call_id, call)
        except BaseException:
            self._close_call(call_id, call)
            raise
        if outcome.admission is None:
            self._close_call(call_id, call)
            raise RemoteProtocolError(
                f"remote {self.remote_name}: the outcome of an admission carries no admission"
            )
        if not outcome.answering:
            self._close_call(call_id, call)
            return outcome.admission
        self._admitted[pid] = _Admitted(call_id, call, turn, outcome.held)
        task = asyncio.current_task()
        if task is not None:  # the turn ends without answer(): its call is cancelled
            task.add_done_callback(lambda _: self._abandon(pid, call_id))
        return outcome.admission

    async def release(self, participant_id: str) -> None:
        await self._ask(self.topics.release, RouteRequest(), participant_id, Any)

    async def participant_left(self, participant_id: str) -> None:
        self._abandon(participant_id)
        self._aids.pop(participant_id, None)
        await self._ask(self.topics.left, RouteRequest(), participant_id, Any)

    async def answer(self, turn: AgentTurn, *, started: Started) -> DestinationResult:
        """Follow the answer ``admit()`` started for this turn, or start one without
        admission (a fallback turn); ``remote_protocol`` gives the exchange."""
        runtime = self._runtime()
        pid = turn.participant_id
        admitted = self._admitted.get(pid)
        if admitted is not None and admitted.turn == turn:
            del self._admitted[pid]
            return await self._follow(admitted.call_id, admitted.call, started)
        self._abandon(pid)
        routed = current_turn_context()
        call_id, call = self._open_call(turn)
        request = RouteTurn(
            call_id,
            turn,
            self._route(),
            self.events.name,
            routed.focused if routed else False,
            admit=False,
            hold=routed is None or routed.started_work,
        )
        try:
            await self._send_turn(runtime, request, call_id, call)
        except BaseException:
            self._close_call(call_id, call)
            raise
        return await self._follow(call_id, call, started)

    def _open_call(self, turn: AgentTurn) -> tuple[str, ProxyCall]:
        call_id = uuid.uuid4().hex
        call = ProxyCall(turn.participant_id, turn.turn_id)
        self._calls[call_id] = self._by_turn[turn.participant_id, turn.turn_id] = call
        return call_id, call

    def _close_call(self, call_id: str, call: ProxyCall) -> None:
        self._calls.pop(call_id, None)
        if self._by_turn.get((call.participant_id, call.turn_id)) is call:
            del self._by_turn[call.participant_id, call.turn_id]

    def _abandon(self, participant_id: str, call_id: str | None = None) -> None:
        """Cancel the call ``admit()`` started for the participant (only ``call_id``, if given)
        that no ``answer()`` took over."""
        admitted = self._admitted.get(participant_id)
        if admitted is None or (call_id is not None and admitted.call_id != call_id):
            return
        del self._admitted[participant_id]
        self._log.info(
            "remote.admitted_call_abandoned", participant=participant_id, turn=admitted.turn.turn_id
        )
        self._signal(admitted.call_id, "cancel", participant_id)
        self._close_call(admitted.call_id, admitted.call)

    async def _send_turn(
        self, runtime: Any, request: RouteTurn, call_id: str, call: ProxyCall
    ) -> RouteOutcome:
        """Ask ``turn``: the outcome, with the call's runtime noted; a timeout is a failure
        before the first chunk (``RemoteAnswerError``, the call cancelled in case it runs)."""
        pid = request.turn.participant_id
        if not await self._liveness.revival():
            raise RemoteAnswerError(
                self.remote_name,
                "DestinationUnreachable: the answer was not accepted: "
                f"{self._liveness.dead_reason()}",
            )

        def send(timeout: float) -> asyncio.Future[RouteOutcome]:
            return cast(
                "asyncio.Future[RouteOutcome]",
                runtime.request(
                    self.topics.turn,
                    request,
                    reply_type=RouteOutcome,
                    participant_id=pid,
                    source=self.name,
                    timeout=timeout,
                ),
            )

        sent = [send(self.timeout_s)]  # sent now, not when a task wrapping ask() first runs
        try:
            await self._answered(send, pid, sent)
            outcome: RouteOutcome = await asyncio.shield(sent[-1])
        except TimeoutError as error:
            self._signal(call_id, "cancel", pid)  # in case the request arrives late
            raise RemoteAnswerError(
                self.remote_name,
                f"DestinationUnreachable: the answer was not accepted: {error}",
            ) from None
        except asyncio.CancelledError:
            # The destination may be answering already (admitted at once): cancel it and,
            # once its outcome says it runs, drain it as a cancelled answer() would.
            self._signal(call_id, "cancel", pid)
            try:
                outcome = await sent[-1]
            except Exception:
                raise asyncio.CancelledError from None
            if outcome.answering:
                self._accepted(call, outcome)
                await self._cancel(call_id, call)
            raise
        self._accepted(call, outcome)
        return outcome

    def _accepted(self, call: ProxyCall, outcome: RouteOutcome) -> None:
        self._liveness.heard(outcome.runtime, outcome.epoch)
        call.runtime, call.epoch = outcome.runtime, outcome.epoch
        for response_id, (_, sender) in list(call.streams.items()):
            if sender != outcome.runtime:  # seen before the outcome, from another runtime
                del call.streams[response_id]
        call.seen_at = asyncio.get_running_loop().time()  # the acceptance is a sign of life

    async def _follow(self, call_id: str, call: ProxyCall, started: Started) -> DestinationResult:
        """Wait for the call's events until it ends: run ``started()`` for a held call's
        ``started`` (then ``proceed``), or before the end of a call that had begun."""
        pid = call.participant_id
        began = False

        async def status() -> CallState:
            return await self._ask(self.topics.status, RouteCallStatus(call_id), pid, CallState)

        try:
            try:
                while True:
                    event = await self._liveness.event(call, status)
                    if event.kind == "started":
                        await started()
                        began = True
                        self._signal(call_id, "proceed", pid)
                        continue
                    if event.began and not began:
                        await started()  # a call that was not held: the router notes it began
                        began = True
                    if event.kind == "done":
                        return event.result or DestinationResult()
                    raise RemoteAnswerError(
                        self.remote_name, event.error or "Cancelled: the answer was cancelled"
                    )
            except DestinationDied:
                self._buried(call)
                if call.spoke and not began:
                    await started()  # it had spoken: the router must not say a failure first
                raise
            except (asyncio.CancelledError, Exception) as error:
                if not isinstance(error, RemoteAnswerError):
                    await self._cancel(call_id, call)
                raise
        finally:
            self._close_call(call_id, call)

    async def _on_event(self, event: RouteEvent, ctx: RuntimeContext) -> None:
        call = self._calls.get(event.call_id)
        if call is None:
            self._log.debug("remote.event_unknown_call", call=event.call_id, kind=event.kind)
            return
        self._liveness.heard_call(call, ctx.metadata.sender, ctx.metadata.epoch)
        call.events.append(event)
        call.arrived.set()

    async def _on_heartbeat(self, metrics: RuntimeMetrics, ctx: RuntimeContext) -> None:
        """A runtime's heartbeat: its calls' destination is alive, or restarted (a newer epoch)."""
        self._liveness.heartbeat(ctx.metadata.sender, ctx.metadata.epoch, self._calls.values())

    async def _on_output(self, message: ResponseOutput, ctx: RuntimeContext) -> None:
        """Follow the reply streams of the calls in flight, to close them if their runtime dies."""
        if message.response_id is None or ctx.participant_id is None:
            return
        call = self._by_turn.get((ctx.participant_id, message.request_id or ""))
        sender = ctx.metadata.sender
        if call is None or call.runtime not in (None, sender):
            return  # None: the destination answers already, its outcome is still on the way
        self._liveness.heard_call(call, sender, ctx.metadata.epoch)
        if message.text.strip():
            call.spoke = True
        if message.final:
            call.streams.pop(message.response_id, None)
        elif len(call.streams) < _STREAMS_PER_CALL:
            call.streams.setdefault(message.response_id, (ctx.metadata.source, sender))

    async def _cancel(self, call_id: str, call: ProxyCall) -> None:
        """Cancel a call and wait (bounded) until the remote answer ended, or its runtime died."""
        self._signal(call_id, "cancel", call.participant_id)
        deadline = asyncio.get_running_loop().time() + self.drain_timeout_s
        while True:
            try:
                event = await self._liveness.next_event(call, deadline)
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

    def _buried(self, call: ProxyCall) -> None:
        """The call's runtime died: remember it, and publish the final frame of each reply
        stream it left open."""
        self._liveness.buried(call)
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
        for response_id, (source, _) in call.streams.items():
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

    async def _ask(self, topic: Topic, message: Any, participant_id: str, reply_type: Any) -> Any:
        if not await self._liveness.revival():
            raise TimeoutError(f"remote {self.remote_name}: {self._liveness.dead_reason()}")
        runtime = self._runtime()

        def send(timeout: float) -> asyncio.Future[Any]:
            return cast(
                "asyncio.Future[Any]",
                runtime.request(
                    topic,
                    message,
                    reply_type=reply_type,
                    participant_id=participant_id,
                    source=self.name,
                    timeout=timeout,
                ),
            )

        sent = [send(self.timeout_s)]
        await self._answered(send, participant_id, sent)
        return await sent[-1]

    async def _answered(
        self,
        send: Callable[[float], asyncio.Future[Any]],
        participant_id: str,
        sent: list[asyncio.Future[Any]],
    ) -> None:
        """Wait until the request ``sent[-1]`` is answered, sending it again to a restarted
        destination (``DestinationLiveness.answered``): the one serving the participant's
        routing aid."""
        cached = self._aids.get(participant_id)
        serving = cached.runtime if cached is not None else None
        await self._liveness.answered(send, participant_id, serving, sent)

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
