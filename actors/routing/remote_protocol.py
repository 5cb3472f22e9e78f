"""The route protocol: how a router reaches a destination in another process over the bus.

This module is the contract both sides keep: the request topics of a destination
(``DestinationTopics``) and the errors the proxy raises; the messages are in
``xrmq.schemas.routing``. ``RemoteAgent`` (``remote.py``, from ``remote(name)``) is a
``RoutableAgent`` proxy registered with the router's runtime; ``DestinationServer``
(``remote_server.py``, from ``serve(name, agent)``) is registered with the destination's
runtime and exposes a local ``RoutableAgent`` under ``name``; ``remote_liveness.py`` is
the proxy's watch over the destination's runtime (the two failure detectors). A router
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
the query, the ``RouteTurn``, the chunk, and the outcome's reply beside the chunk.
Peers of different protocol versions refuse each other at the first routing-aid ask
with an error naming both versions: a protocol-1 proxy's empty ask gets an
``AskError``, and a protocol-1 server's ``RoutingAid`` reply fails as
``RemoteProtocolError`` at the proxy, so the destination is ineligible with that
reason instead of timing out.

A destination that dies costs its own turn only. With ``dead_after_s`` the proxy
watches the runtime that accepted the call (``RouteOutcome`` names it and its
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

from dataclasses import dataclass

from xrmq.schemas._validation import check_name
from xrmq.schemas.routing import (
    RouteAidAsk,
    RouteAids,
    RouteCallStatus,
    RouteRequest,
    RouteSignal,
    RouteTurn,
)
from xrmq.topics import Topic

AIDS_KEPT = 1024
"""Participants whose routing aid a proxy caches, and a server re-reads and publishes."""


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
