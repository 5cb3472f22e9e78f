"""Routing contracts (the upstream xr_ai_routing types) as wire types.

They are msgspec Structs so a router can reach a destination in another process over
the bus with the same types it uses in-process.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ._validation import require, require_image_urls, require_name, require_text
from .stages import DestinationStages


class AgentExchange(msgspec.Struct, frozen=True):
    """One completed user request plus the destination-provided response context."""

    request: str
    response: str
    timestamp_us: int | None = None
    exchange_id: str | None = None
    """Identity of the exchange (the turn id) so reconciliation never replays it."""
    destination: str | None = None


class AgentTurn(msgspec.Struct, frozen=True):
    """The current user turn and the complete exchanges selected for this destination.

    Positional construction follows the SDK: ``AgentTurn(participant_id, turn_id, text)``.
    """

    participant_id: str
    turn_id: str
    text: str
    history: tuple[AgentExchange, ...] = ()
    timestamp_us: int | None = None
    images: tuple[str, ...] = ()
    """The query's images (``UserQuery.images``)."""

    def __post_init__(self) -> None:
        require_name(self.participant_id, "AgentTurn", "participant_id")
        require_name(self.turn_id, "AgentTurn", "turn_id")
        require_text(self.text, "AgentTurn", "text")
        require_image_urls(self.images, "AgentTurn", "images")


class RoutingAid(msgspec.Struct, frozen=True):
    """Brief routing metadata, separate from the destination's full instructions."""

    description: str
    eligible: bool = True
    priority: int = 0
    keywords: tuple[str, ...] = ()
    """Words that make a rule-based decision service pick this destination."""

    def __post_init__(self) -> None:
        require_text(self.description, "RoutingAid", "description")


Disposition = Literal["accept", "decline", "clarify", "release"]


class Admission(msgspec.Struct, frozen=True):
    """A destination's decision, made before it speaks or starts work.

    ``accept`` permits work (``focus=True`` also takes explicit focus); ``decline`` returns
    control for another route; ``clarify`` ends routing with ``text`` as a question;
    ``release`` clears focus and returns the same query to ordinary routing.
    """

    disposition: Disposition
    text: str = ""
    focus: bool = False

    def __post_init__(self) -> None:
        if self.disposition == "clarify":
            require_text(self.text, "Admission", "text")
        require(
            not self.focus or self.disposition == "accept",
            "Admission",
            "focus",
            "only an accept can take focus",
        )


FocusTransition = Literal["take", "release"]


class DestinationResult(msgspec.Struct, frozen=True):
    """Optional completed response context and the router's focus transition; ``stages``:
    when the destination sent its model request, got the first token and published its
    first chunk, and the model's usage (``schemas/turns.py``), for the turn's record."""

    response: str | None = None
    focus: FocusTransition | None = None
    stages: DestinationStages | None = None


# -- Remote destinations --------------------------------------------------------------
#
# A router reaches a destination in another process through a proxy that speaks these
# messages on the destination's topics (``route.<name>.<operation>``); the participant
# travels in the envelope. ``xrmq.actors.routing.remote`` documents the exchange.


class RouteRequest(msgspec.Struct, frozen=True):
    """Ask a remote destination about the envelope's participant: its routing aid, a
    focus release or the participant's departure."""


ROUTE_PROTOCOL = 2
"""The version of the remote-destination protocol these messages make up. 1: an ask per
routing aid, admission and answer (``route.NAME.admit`` / ``route.NAME.answer``); 2:
published routing aids and one ``RouteTurn`` per turn. A proxy and a server of different
versions refuse each other at the first routing-aid ask, naming both versions."""


class RouteAidAsk(msgspec.Struct, frozen=True):
    """Ask a remote destination for the envelope participant's routing aid; the reply is a
    ``RouteAids``. ``protocol`` is the asker's ``ROUTE_PROTOCOL`` (a protocol-1 proxy
    sends an empty map, read as 1, and gets an error naming both versions)."""

    protocol: int = 1


class RouteAids(msgspec.Struct, frozen=True):
    """A destination's routing aid for the envelope participant, versioned.

    The reply to ``RouteAidAsk``, and what the destination publishes on
    ``route.NAME.aids`` whenever the participant's aid changes. ``version`` grows with
    every change the destination's runtime (``runtime``, incarnation ``epoch``) makes to
    any participant's aid, so a proxy keeps the newest it saw per participant and
    incarnation. ``protocol``: the destination's ``ROUTE_PROTOCOL``.
    """

    protocol: int
    version: int
    aid: RoutingAid
    runtime: str
    epoch: int


class RouteTurn(msgspec.Struct, frozen=True):
    """One turn for a remote destination: admission and answer in one request.

    With ``admit`` the destination runs ``admit(turn, focused=focused)`` and, when it
    accepts, starts answering at once; without, it answers (a fallback turn). The reply
    is a ``RouteOutcome``; the call's events go to ``events`` under ``call_id``. ``hold``:
    the asker's ``started()`` has work (it says router text, or changes focus), so the
    first chunk waits for the proxy's ``proceed``; an accept with text or focus holds too.
    """

    call_id: str
    turn: AgentTurn
    route: str
    """The router's name for the destination: the source of its published reply."""
    events: str
    """Topic (carrying ``RouteEvent``) on which the asking proxy receives this call's events."""
    focused: bool = False
    """Whether the destination held the participant's focus when the router chose it."""
    admit: bool = True
    hold: bool = True

    def __post_init__(self) -> None:
        require_name(self.call_id, "RouteTurn", "call_id")
        require_name(self.events, "RouteTurn", "events")


class RouteOutcome(msgspec.Struct, frozen=True):
    """A destination's reply to ``RouteTurn``.

    ``admission``: what ``admit()`` returned (None without ``admit``). ``answering``: an
    answer call runs (its events follow); ``held``: its first chunk waits for ``proceed``.
    ``runtime`` and ``epoch`` name the runtime (and incarnation) running the call, so the
    proxy can tell from that runtime's heartbeat when it dies.
    """

    runtime: str
    epoch: int
    admission: Admission | None = None
    answering: bool = False
    held: bool = False


RouteSignalKind = Literal["proceed", "cancel"]


class RouteSignal(msgspec.Struct, frozen=True):
    """From the proxy to a running remote answer: ``proceed`` (the router's ``started()``
    returned, publish the first chunk; only a held call waits for it) or ``cancel`` (stop,
    finalize, report ``cancelled``)."""

    call_id: str
    kind: RouteSignalKind


class RouteCallStatus(msgspec.Struct, frozen=True):
    """Ask a remote destination whether it still runs answer ``call_id``; the reply is a
    ``CallState``: ``running``, ``finished`` (its end event is on the way) or ``unknown``
    (this incarnation never ran it: the destination restarted mid-turn)."""

    call_id: str


CallState = Literal["running", "finished", "unknown"]


RouteEventKind = Literal["started", "done", "failed", "cancelled"]


class RouteEvent(msgspec.Struct, frozen=True):
    """From a remote answer to its proxy.

    ``started``: the first chunk of a held call is ready; the destination waits for
    ``proceed`` (a call that is not held publishes at once and sends no ``started``).
    ``done`` carries the ``result``; ``failed`` carries ``error``; ``cancelled`` ends a
    call that was cancelled. Exactly one of the last three ends every call, and only
    after the destination's final frame was published; ``began`` says whether the
    destination had reached ``started()`` (its first output) by then.
    """

    call_id: str
    kind: RouteEventKind
    result: DestinationResult | None = None
    error: str | None = None
    began: bool = False


# -- How a turn ended ------------------------------------------------------------------

TurnStatus = Literal["answered", "clarified", "unanswered", "failed", "canceled"]


class TurnEnded(msgspec.Struct, frozen=True):
    """The router's last word on one turn, published after everything said for it.

    ``request_id`` is the turn id: the envelope ``message_id`` of the ``UserQuery``
    (every reply fragment of the turn carries it as ``request_id`` too). ``status``:
    ``answered`` (``route`` answered; its final frame came first), ``clarified``
    (``route`` asked a question), ``unanswered`` (no destination took the turn; the
    router said why), ``failed`` (``route`` failed; the router said so, or apologized
    for the rest of the answer when the destination had started its reply),
    ``canceled`` (a newer turn, an interruption or a departure ended it). ``error`` is
    the cause of ``failed`` and ``unanswered`` as ``"<Kind>: <what happened>"``, e.g.
    ``"ModelUnavailable: model local at http://127.0.0.1:8000/v1: connection
    refused"``. Every field is always on the wire.
    """

    request_id: str
    status: TurnStatus
    route: str | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        require_name(self.request_id, "TurnEnded", "request_id")
