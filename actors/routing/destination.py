"""The destination contract: what a router needs from an agent it routes turns to, and
what every destination does first when it answers.

``RoutableAgent`` is structural (a ``Protocol``): a local ``Conversation``, an
application's own agent and a ``RemoteAgent`` proxy for an agent in another process
all satisfy it, so the router never knows where a destination runs.

While a router admits or answers a turn it sets the *turn context* (a contextvar), so
a destination can read the name the router knows it by, e.g. to attribute its
published reply, without the name being wired into its constructor.

``answer_prologue`` is the one start of a destination's ``answer()``: the route it
answers under, and (for a destination with a shared context) the participant's context
fetched and the turn's history reconciled into it, so every destination sees the
exchanges the router shares the same way.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from xrmq.schemas import Admission, AgentTurn, DestinationResult, RoutingAid
from xrmq.schemas._validation import is_name

Started = Callable[[], Awaitable[None]]
"""Awaited by a destination once, right before it publishes its first output."""


@runtime_checkable
class RoutableAgent(Protocol):
    """An agent that owns its state and handles admitted or fallback turns.

    - ``routing_aid(participant_id)`` returns the destination's ``RoutingAid`` (or an
      awaitable of it, for a destination that must ask someone: a remote proxy).
    - ``admit(turn, focused=...)`` decides before any speech or work starts.
    - ``answer(turn, started=...)`` does the work and publishes the destination's own
      output; it awaits ``started()`` before its first output and returns the
      response context for the shared history and the focus transition.
    - ``release(participant_id)``: the router dropped this destination's focus.
    - ``participant_left(participant_id)``: the participant is gone; after this call
      the destination holds nothing for them.
    """

    def routing_aid(self, participant_id: str) -> RoutingAid | Awaitable[RoutingAid]: ...

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission: ...

    async def answer(self, turn: AgentTurn, *, started: Started) -> DestinationResult: ...

    async def release(self, participant_id: str) -> None: ...

    async def participant_left(self, participant_id: str) -> None: ...


class ClosingDestination:
    """``routing_aid`` and ``admit`` for a destination that serves until it is closed.

    The class sets ``routing`` (its ``RoutingAid``) and ``_closed``: until closed it
    offers ``routing`` and accepts every turn (without retaining focus); once closed it is
    ineligible and declines, so a router stops choosing it.
    """

    routing: RoutingAid
    _closed: bool

    def routing_aid(self, participant_id: str) -> RoutingAid:
        """This destination's routing metadata; ineligible once closed."""
        if self._closed:
            return RoutingAid(
                self.routing.description,
                eligible=False,
                priority=self.routing.priority,
                keywords=self.routing.keywords,
            )
        return self.routing

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission:
        """Accept ordinary turns without retaining participant focus; decline once closed."""
        return Admission("decline" if self._closed else "accept")


_METHODS = ("routing_aid", "admit", "answer", "release", "participant_left")


def check_routable(owner: str, name: str, agent: object) -> None:
    """Raise ``ValueError`` naming ``owner.agents[name]`` unless ``agent`` is routable."""
    if not is_name(name):
        raise ValueError(f"{owner}.agents: every name must be a non-empty string without NUL")
    missing = [method for method in _METHODS if not callable(getattr(agent, method, None))]
    if missing:
        raise ValueError(
            f"{owner}.agents[{name!r}]: not a RoutableAgent, it lacks {', '.join(missing)}"
        )


async def routing_aid_of(agent: RoutableAgent, participant_id: str) -> RoutingAid:
    """The agent's routing aid for ``participant_id``, awaited if it is awaitable."""
    aid = agent.routing_aid(participant_id)
    if inspect.isawaitable(aid):
        aid = await aid
    return aid


@dataclass(frozen=True, slots=True)
class RoutingTurnContext:
    """Read-only routing facts about the turn a destination is admitting or answering."""

    route: str
    """The name the router knows the destination by (the key in its ``agents``)."""
    participant_id: str
    turn_id: str
    focused: bool
    """Whether the destination held the participant's explicit focus when routed."""
    started_work: bool = True
    """Whether the router's ``started()`` for this turn does more than note that the answer
    began (says text, changes focus). ``AgentRouter`` says False: it says its text before
    calling ``answer()``. A remote destination publishes its first chunk without waiting
    for the router when False (``remote``); a local one awaits ``started()`` either way."""


_CURRENT: contextvars.ContextVar[RoutingTurnContext | None] = contextvars.ContextVar(
    "xrmq_routing_turn", default=None
)


def current_turn_context() -> RoutingTurnContext | None:
    """The routing context of the turn being admitted or answered here, or None outside a router."""
    return _CURRENT.get()


@contextmanager
def routed_turn(context: RoutingTurnContext) -> Iterator[RoutingTurnContext]:
    """Make ``context`` the current turn context for the code inside the block."""
    token = _CURRENT.set(context)
    try:
        yield context
    finally:
        _CURRENT.reset(token)


class TurnHistory(Protocol):
    """What ``answer_prologue`` needs of a destination's context (a ``ContextManager``)."""

    def reconcile_history(
        self,
        participant_id: str,
        exchanges: Sequence[tuple[str, str, int | None]],
        *,
        exchange_ids: Sequence[object | None],
    ) -> None: ...


async def ensure_context(context: object, participant_id: str) -> None:
    """Have ``context`` hold the participant's whole context before it is rendered: a
    ``ContextManager`` whose replica evicted the participant fetches it from its section
    hosts (``ContextManager.ensure``, bounded by its control timeout). A context without
    ``ensure`` (a test double) holds everything already."""
    ensure = getattr(context, "ensure", None)
    if ensure is not None:
        await ensure(participant_id)


async def answer_prologue(
    turn: AgentTurn, default_route: str, context: TurnHistory | None = None
) -> str:
    """Start answering ``turn``: return the route to answer under (the router's name for the
    destination, ``default_route`` outside a router). With ``context``, first fetch the
    participant's context (``ensure_context``: an evicted participant's notes) and reconcile
    the turn's history into it (exchanges it already holds are not replayed)."""
    routed = _CURRENT.get()
    route = routed.route if routed is not None else default_route
    if context is None:
        return route
    pid = turn.participant_id
    await ensure_context(context, pid)
    if turn.history:
        context.reconcile_history(
            pid,
            [
                (exchange.request, exchange.response, exchange.timestamp_us)
                for exchange in turn.history
            ],
            exchange_ids=[exchange.exchange_id for exchange in turn.history],
        )
    return route
