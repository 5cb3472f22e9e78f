"""Location transparency: a destination in another process, reached over the bus.

``RemoteAgent`` (from ``remote(name)``) is a ``RoutableAgent`` proxy registered with the
router's runtime; ``DestinationServer`` (from ``serve(name, agent)``) is registered with
the destination's runtime and exposes a local ``RoutableAgent`` under ``name``. A router
given ``{"conversation": remote("conversation")}`` behaves as with the local agent:
same admissions, same published replies (source = the router's name for it), same
``started()`` order, cancellation and drain.

Protocol for destination NAME, version ``ROUTE_PROTOCOL`` (schemas in
``xrmq.schemas.routing``; the participant is in the envelope; "ask" is
``AgentRuntime.ask``, whose reply is the handler's result):

==================  ==============  =======  ==========================================
topic               payload         how      reply / meaning
==================  ==============  =======  ==========================================
route.NAME.aid      RouteAidAsk     ask      RouteAids: the participant's routing aid
route.NAME.aids     RouteAids       publish  the participant's aid changed (versioned)
route.NAME.turn     RouteTurn       ask      RouteOutcome: the admission, and whether
                                             an answer call runs
route.NAME.release  RouteRequest    ask      None, after ``release()`` returned
route.NAME.left     RouteRequest    ask      None, after ``participant_left()`` returned
route.NAME.status   RouteCallStatus ask      CallState of one answer call
route.NAME.signal   RouteSignal     publish  ``proceed`` / ``cancel`` one call
(RouteTurn.events)  RouteEvent      publish  ``started`` (a held call only), then one
                                             of ``done`` / ``failed`` / ``cancelled``
==================  ==============  =======  ==========================================

Routing aids are not asked per turn. The proxy keeps the newest ``RouteAids`` per
participant (the ask's reply, or a publication) and asks only when it has none or the
one it has is stale: the destination's runtime was found dead, restarted (a newer
epoch), or has not been heard from (heartbeat, publication, reply or event) for
``dead_after_s`` (with heartbeats watched) or ``liveness_s``. The server publishes a
participant's aid whenever it changes: it re-reads the aids it handed out after every
request for that participant, after each answer ends and every ``aid_check_s``, and
at once on ``routing_aid_changed()``. Eligibility is the same as with an ask per turn,
up to that delay for a change the destination makes on its own.

A turn is one request. ``admit()`` sends a ``RouteTurn``: the server admits and, when
it accepts, starts answering in the same step; the reply carries the ``Admission``
(a decline, clarify or release comes back as the outcome, and the router's reroute and
default rules run as with a local destination). The router's ``answer()`` for that
turn then takes over the running call; a turn the router never answers (cancelled in
between, or answered otherwise) has its call cancelled. A fallback ``answer()`` without
admission sends a ``RouteTurn`` with ``admit`` false.

``started()``: the first chunk waits for the router only when the router has work
there. The request's ``hold`` says so (``RoutingTurnContext.started_work``: false
for ``AgentRouter``, whose text is said before ``answer()``; true for any other
caller), and an accept with text or focus holds too (the router says the text and
moves the focus after the admission). A held call publishes ``started`` and waits;
the proxy awaits the router's ``started()`` and publishes ``proceed``; only then does
the destination publish its first chunk, and it has been answering meanwhile (the
wait overlaps the model's first token instead of following it). So router text said
before ``started()`` returned reaches every subscriber first: the broker forwards in
causal order. A call that is not held publishes at once; its end event says whether
it had begun (``began``), and the proxy calls the router's ``started()`` then, so the
router knows whether the destination had spoken when it failed. The call ends with
``done`` (the ``DestinationResult``), ``failed`` (the error text; the proxy raises
``RemoteAnswerError``) or ``cancelled``, each published after the destination
finished, so after its final frame. When the router cancels the proxy's ``answer()``,
the proxy publishes ``cancel`` and waits up to ``drain_timeout_s`` for the call to end
before it re-raises: the remote answer is cancelled and drained like a local one.

A turn crosses the broker four times before its first chunk, three of them in series:
the query, the ``RouteTurn``, the chunk, and the outcome's reply beside the chunk
(protocol 1 took ten, all in series). Peers of different protocol versions refuse
each other at the first routing-aid ask with an error naming both versions: a
protocol-1 proxy's empty ask gets an ``AskError``, and a protocol-1 server's
``RoutingAid`` reply fails as ``RemoteProtocolError`` at the proxy, so the destination
is ineligible with that reason instead of timing out.

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
A destination that dies between turns is not yet known dead when the next request
leaves: that request went to nobody. Once the runtime serving the participant heartbeats
as a new incarnation, the proxy sends the request again (within the same ``timeout_s``),
so that turn too is answered by the restarted process instead of declined.

Without ``dead_after_s`` (no heartbeats to watch), the proxy instead asks ``status``
after every ``liveness_s`` of silence while it waits for a call's events: a destination
that restarted mid-turn answers ``unknown`` and one that is gone does not answer, and
either fails the call at once like a death (``DestinationDied``, its cause naming
``DestinationLost``) instead of leaving the turn open. The next requests are then sent
at once (nothing would announce the destination's return): the first reply from it
shows it back, and its cached aids are asked again meanwhile.

Failures travel as ``"<Kind>: <message>"`` (the destination's exception type and
text): the proxy raises ``RemoteAnswerError`` whose ``cause`` is that string, which the
router reports in the turn's ``TurnEnded``.

Asks time out after ``timeout_s``: a routing aid that cannot be had makes the
destination ineligible, an unanswered ``RouteTurn`` from ``admit()`` counts as a
decline, one from a fallback ``answer()`` is a failure before the first chunk (the
router reports it). The server runs ``admit``, ``release`` and ``participant_left`` in
its handler (one at a time), and each answer on a task it owns and cancels on stop.

Local destinations (in the router's process) are untouched by all this: the router
calls them as before.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

import msgspec

from xrmq.actors.runtime import (
    DEFERRED_REPLY,
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
from xrmq.schemas._validation import check_name
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

from .destination import (
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
_AIDS_KEPT = 1024
"""Participants whose routing aid a proxy caches, and a server re-reads and publishes."""
_SERVERS_KEPT = 64
"""Destination runtimes a proxy remembers having heard from (incarnation and time)."""


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


class RemoteProtocolError(RuntimeError):
    """The remote destination speaks another version of the route protocol than this proxy."""


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


@dataclass(frozen=True, slots=True)
class _Admitted:
    """A call ``admit()`` started, waiting for the router's ``answer()`` of the same turn."""

    call_id: str
    call: _ProxyCall
    turn: AgentTurn
    held: bool


@dataclass(frozen=True, slots=True)
class DestinationTopics:
    """The request topics of one remote destination."""

    aid: Topic[RouteAidAsk]
    aids: Topic[RouteAids]
    turn: Topic[RouteTurn]
    release: Topic[RouteRequest]
    left: Topic[RouteRequest]
    signal: Topic[RouteSignal]
    status: Topic[RouteCallStatus]

    @classmethod
    def of(cls, name: str) -> DestinationTopics:
        check_name(name, "name")
        prefix = f"route.{name}."
        return cls(
            aid=Topic(prefix + "aid", RouteAidAsk),
            aids=Topic(prefix + "aids", RouteAids),
            turn=Topic(prefix + "turn", RouteTurn),
            release=Topic(prefix + "release", RouteRequest),
            left=Topic(prefix + "left", RouteRequest),
            signal=Topic(prefix + "signal", RouteSignal),
            status=Topic(prefix + "status", RouteCallStatus),
        )


class RemoteAgent(Agent):
    """A ``RoutableAgent`` proxy for the destination a ``DestinationServer`` serves as ``name``.

    Register it with the router's runtime (any actor name) before the runtime starts;
    it receives its answer calls' events and the destination's routing aids there.
    ``timeout_s`` bounds every ask; ``drain_timeout_s`` bounds the wait for a cancelled
    answer to end. ``dead_after_s`` (None: never) and ``output_topic``: see "A
    destination that dies" in the module docstring; the destination's runtime must
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
        self._calls: dict[str, _ProxyCall] = {}
        self._by_turn: dict[tuple[str, str], _ProxyCall] = {}
        """The same calls by (participant, turn id): what their reply fragments carry."""
        self._admitted: dict[str, _Admitted] = {}
        """By participant: the call its last ``admit()`` started, until ``answer()`` takes it."""
        self._aids: OrderedDict[str, RouteAids] = OrderedDict()
        """The newest routing aid per participant, least recently used first."""
        self._servers: OrderedDict[str, tuple[int, float]] = OrderedDict()
        """Destination runtimes heard from: runtime -> (newest epoch, when; loop time)."""
        self.aid_asks = 0
        """Routing-aid asks sent (the cache missed or was stale)."""
        self._dead: tuple[str, int] | None = None
        """The (runtime, epoch) found dead, until that runtime is heard from again."""
        self._revived = asyncio.Event()
        self._restarts: dict[str, set[asyncio.Future[int]]] = {}
        """By destination runtime: futures resolved with the epoch of a newer incarnation of it
        when one is heard."""
        self.aids_ignored = 0
        """Published aids dropped: another protocol version, or no participant."""
        self._log = get_logger(actor=f"remote.{name}")
        self._warnings = AggregatedWarnings(self._log)

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
        if cached is not None and self._fresh(cached):
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
        self._heard_server(reply.runtime, reply.epoch)
        self._keep_aid(participant_id, reply)
        return reply.aid

    def _fresh(self, cached: RouteAids) -> bool:
        """Whether a cached aid may be used: its runtime is alive, the same incarnation, and
        was heard from within ``dead_after_s`` (or ``liveness_s``)."""
        if self._dead is not None:
            return False
        server = self._servers.get(cached.runtime)
        if server is None or server[0] != cached.epoch:
            return False
        window = self.dead_after_s if self.dead_after_s is not None else self.liveness_s
        return asyncio.get_running_loop().time() - server[1] <= window

    def _heard_server(self, runtime: str, epoch: int) -> None:
        known = self._servers.get(runtime)
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
        self._servers[runtime] = (epoch, asyncio.get_running_loop().time())
        self._servers.move_to_end(runtime)
        if len(self._servers) > _SERVERS_KEPT:
            self._servers.popitem(last=False)

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
        if len(self._aids) > _AIDS_KEPT:
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
        self._heard_server(aids.runtime, aids.epoch)
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
        admission (a fallback turn); see the module docstring for the exchange."""
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

    def _open_call(self, turn: AgentTurn) -> tuple[str, _ProxyCall]:
        call_id = uuid.uuid4().hex
        call = _ProxyCall(turn.participant_id, turn.turn_id)
        self._calls[call_id] = self._by_turn[turn.participant_id, turn.turn_id] = call
        return call_id, call

    def _close_call(self, call_id: str, call: _ProxyCall) -> None:
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
        self, runtime: Any, request: RouteTurn, call_id: str, call: _ProxyCall
    ) -> RouteOutcome:
        """Ask ``turn``: the outcome, with the call's runtime noted; a timeout is a failure
        before the first chunk (``RemoteAnswerError``, the call cancelled in case it runs)."""
        pid = request.turn.participant_id
        if not await self._revival():
            raise RemoteAnswerError(
                self.remote_name,
                f"DestinationUnreachable: the answer was not accepted: {self._dead_reason()}",
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

    def _accepted(self, call: _ProxyCall, outcome: RouteOutcome) -> None:
        self._heard_server(outcome.runtime, outcome.epoch)
        call.runtime, call.epoch = outcome.runtime, outcome.epoch
        for response_id, (_, sender) in list(call.streams.items()):
            if sender != outcome.runtime:  # seen before the outcome, from another runtime
                del call.streams[response_id]
        call.seen_at = asyncio.get_running_loop().time()  # the acceptance is a sign of life

    async def _follow(self, call_id: str, call: _ProxyCall, started: Started) -> DestinationResult:
        """Wait for the call's events until it ends: run ``started()`` for a held call's
        ``started`` (then ``proceed``), or before the end of a call that had begun."""
        pid = call.participant_id
        began = False
        try:
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
        if sender in self._servers:
            self._heard_server(sender, epoch)
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
        sender = ctx.metadata.sender
        if call is None or call.runtime not in (None, sender):
            return  # None: the destination answers already, its outcome is still on the way
        self._heard(call, ctx)
        if message.text.strip():
            call.spoke = True
        if message.final:
            call.streams.pop(message.response_id, None)
        elif len(call.streams) < _STREAMS_PER_CALL:
            call.streams.setdefault(message.response_id, (ctx.metadata.source, sender))

    def _heard(self, call: _ProxyCall, ctx: RuntimeContext) -> None:
        if ctx.metadata.sender == call.runtime and ctx.metadata.epoch == call.epoch:
            call.seen_at = asyncio.get_running_loop().time()
            self._heard_server(call.runtime, call.epoch)

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

    async def _revival(self) -> bool:
        """Wait (at most ``timeout_s``) for a dead destination to heartbeat again; False if not.

        Only with heartbeats watched (``dead_after_s``): without, no heartbeat would ever
        announce it, and waiting failed every request after the destination was once found
        dead (a status check unanswered within ``timeout_s``), long after a restarted
        process was back. Then the request itself probes it: the dead mark only makes the
        cached aids stale, and a reply from that runtime clears it (``_heard_server``).
        """
        if self._dead is None or self.dead_after_s is None:
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
        """Wait until the request ``sent[-1]`` is answered (or failed), sending it again with
        ``send(timeout left)`` (appended to ``sent``) when a new incarnation of the runtime
        serving ``participant_id`` is heard first that started after the request was sent
        (its epoch is its start time): a request sent to a destination that died between
        turns went to nobody, and its restarted process never sees it (issue 30, item 6:
        the next turn was declined after ``timeout_s`` instead of answered). One that
        started before may have it already, and is left to answer it once.

        Only with heartbeats watched (``dead_after_s``), which announce the restart; the
        serving runtime is the one of the participant's routing aid, else the only one heard.
        """
        if self.dead_after_s is None:
            return
        cached = self._aids.get(participant_id)
        serving = cached.runtime if cached is not None else None
        if serving is None and len(self._servers) == 1:
            serving = next(iter(self._servers))
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
        if len(self._aids) > _AIDS_KEPT:
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


def serve(
    name: str, agent: RoutableAgent, *, shutdown_grace_s: float = 0.0, aid_check_s: float = 0.5
) -> DestinationServer:
    """Expose ``agent`` as destination ``name``; register the result with the agent's runtime."""
    return DestinationServer(
        name, agent, shutdown_grace_s=shutdown_grace_s, aid_check_s=aid_check_s
    )
