"""The router's turn policy, pure: outcomes in, actions out (rules 2-7 of ``router.py``).

``turn_policy`` is a generator: it yields one ``Action`` at a time and is sent the
outcome of each (``None`` for the ones that have none); it returns the ``RouteResult``.
It awaits nothing, calls nothing and reads no clock, so every rule is a table test
(``tests/test_router_policy.py``) and the router (``router.py``) only performs actions:
ask for a routing decision or an admission, say text, start an answer, release a
destination, log a note. The lanes (rule 1: one turn at a time per participant) and the
departures (rule 8) stay in the router, around this.

The policy changes only ``ParticipantRouting`` (focus and history) and only where the
rules say; ``history`` of the turn it is given is set from that state first (rule 7).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from xrmq.schemas import Admission, AgentExchange, AgentTurn, DestinationResult, RoutingAid

from .state import ParticipantRouting, candidates

RouteStatus = Literal["answered", "clarified", "unanswered", "failed", "canceled"]

_INELIGIBLE = RoutingAid("unavailable", eligible=False)


@dataclass(frozen=True, slots=True)
class RouteResult:
    """How one turn ended.

    ``answered``: ``route`` answered, ``response`` is its response context.
    ``clarified``: ``route`` asked the clarification ``response``.
    ``unanswered``: nobody took the turn; the router said ``response``; ``error`` says
    why (``"NoDestination: <route>: <reason>; ..."``).
    ``failed``: ``route`` raised; ``error`` is ``"<Kind>: <message>"`` of what it raised.
    ``canceled``: a newer turn, an interruption, the participant's departure or
    ``stop()`` cancelled it.
    """

    turn_id: str
    status: RouteStatus
    route: str | None = None
    response: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Decide:
    """Ask the decision service to choose among ``choices`` for ``turn``; send back a name
    or None (the service failed, or chose no candidate)."""

    turn: AgentTurn
    choices: dict[str, RoutingAid]


@dataclass(frozen=True, slots=True)
class Admit:
    """Ask ``route`` to admit ``turn``; send back its ``Admission`` (a failure: a decline)."""

    route: str
    turn: AgentTurn
    focused: bool


@dataclass(frozen=True, slots=True)
class Say:
    """Say router-owned ``text`` for the turn (``route``: the destination it concerns)."""

    route: str | None
    text: str


@dataclass(frozen=True, slots=True)
class Answer:
    """Let ``route`` answer ``turn``; send back an ``Answered``."""

    route: str
    turn: AgentTurn
    focused: bool


@dataclass(frozen=True, slots=True)
class Release:
    """Tell ``route`` it lost the participant's focus (its ``release()``)."""

    route: str


@dataclass(frozen=True, slots=True)
class Note:
    """A log line: ``event`` at ``level`` with ``fields``."""

    level: Literal["info", "warning", "error"]
    event: str
    fields: dict[str, Any] = field(default_factory=dict)


Action = Decide | Admit | Say | Answer | Release | Note


@dataclass(frozen=True, slots=True)
class Answered:
    """The outcome of an ``Answer``: what ``answer()`` returned, or the error it raised.

    ``error`` names the failure as it travels (``"<Kind>: <message>"``, ``failure.py``),
    ``detail`` is what the log line shows (its ``repr``); ``began``: whether the
    destination had called ``started()`` (its output began).
    """

    result: object = None
    error: str | None = None
    detail: str | None = None
    began: bool = False


TurnPolicy = Generator[Action, Any, RouteResult]


def turn_policy(
    turn: AgentTurn,
    state: ParticipantRouting,
    aids: Mapping[str, RoutingAid],
    *,
    default: str | None,
    unavailable: str,
    failure: str,
    unreachable: Mapping[str, str] | None = None,
) -> TurnPolicy:
    """Route ``turn`` of the participant whose routing ``state`` this is.

    ``aids`` is every destination's routing aid (in registration order; one that could
    not be had is ineligible, and ``unreachable`` says why, by name); ``default`` the
    fallback destination; ``unavailable`` and ``failure`` the router's texts
    (``RouterTexts``).
    """
    turn = msgspec.structs.replace(turn, history=tuple(state.history))  # rule 7
    why: dict[str, str] = dict(unreachable or {})
    """Why each destination did not answer, for an unanswered turn's error."""
    excluded: set[str] = set()
    decline_text: str | None = None
    decisions_left = 2  # rule 4: the first selection and one reroute after a decline
    target: str | None = None
    if state.focus is not None:  # rule 2: the focus holder first, while it is eligible
        if aids.get(state.focus, _INELIGIBLE).eligible:
            target = state.focus
        else:
            holder = state.focus
            state.clear_focus(holder)
            yield Note("info", "router.focus_lost", {"route": holder, "reason": "ineligible"})
            yield Release(holder)
    while True:
        if target is None:  # rule 3: the decision service chooses among the eligible
            choices = candidates(aids, excluded)
            if decisions_left == 0 or not choices:
                break
            decisions_left -= 1
            choice = yield Decide(turn, choices)
            if choice is None or choice not in choices:
                break
            target = choice
        focused = target == state.focus
        admission: Admission = yield Admit(target, turn, focused)  # rule 4
        yield Note(
            "info",
            "router.admission",
            {"route": target, "disposition": admission.disposition, "focused": focused},
        )
        if admission.disposition == "accept":
            if admission.focus:
                yield from _take_focus(state, target)
            if admission.text.strip():
                yield Say(target, admission.text)  # rule 6: said before the answer starts
            return (yield from _answer(turn, state, target, focused, failure))
        if admission.disposition == "clarify":
            yield Say(target, admission.text)
            state.remember(
                AgentExchange(turn.text, admission.text, turn.timestamp_us, turn.turn_id, target)
            )
            return RouteResult(turn.turn_id, "clarified", target, admission.text)
        if admission.disposition == "release" and focused:
            state.clear_focus(target)
            yield Note("info", "router.focus_released", {"route": target})
        else:  # a decline (and a release from anyone but the focus holder)
            excluded.add(target)
            said = admission.text.strip()
            why[target] = "declined" + (f" ({said})" if said else "")
            decline_text = admission.text if said else decline_text
        target = None
    # rule 5: an eligible default that has not declined answers without admission
    if default is not None and default not in excluded and aids.get(default, _INELIGIBLE).eligible:
        yield Note("info", "router.fallback", {"route": default})
        return (yield from _answer(turn, state, default, False, failure))
    text = decline_text or unavailable
    yield Say(None, text)
    for name, aid in aids.items():
        if not aid.eligible:
            why.setdefault(name, "not eligible")
    reasons = "; ".join(f"{name}: {reason}" for name, reason in why.items())
    error = f"NoDestination: {reasons or 'no destination was chosen'}"
    return RouteResult(turn.turn_id, "unanswered", None, text, error=error)


def _take_focus(state: ParticipantRouting, route: str) -> Generator[Action, Any, None]:
    previous = state.take_focus(route)
    yield Note("info", "router.focus_taken", {"route": route, "previous": previous})
    if previous is not None:
        yield Release(previous)


def _answer(
    turn: AgentTurn, state: ParticipantRouting, route: str, focused: bool, failure: str
) -> Generator[Action, Any, RouteResult]:
    outcome: Answered = yield Answer(route, turn, focused)
    if (
        outcome.error is not None
    ):  # rule 6: a failure before the first output is the router's to say
        yield Note(
            "error",
            "router.answer_failed",
            {"route": route, "started": outcome.began, "error": outcome.detail or outcome.error},
        )
        if not outcome.began:
            yield Say(route, failure)
        return RouteResult(turn.turn_id, "failed", route, error=outcome.error)
    result = outcome.result
    if not isinstance(result, DestinationResult):
        kind = type(result).__name__
        yield Note("error", "router.answer_invalid", {"route": route, "result": kind})
        return RouteResult(
            turn.turn_id, "failed", route, error=f"InvalidResult: answer returned {kind}"
        )
    if result.focus == "take":
        yield from _take_focus(state, route)
    elif result.focus == "release" and state.clear_focus(route):
        yield Note("info", "router.focus_released", {"route": route})
    if result.response is not None and result.response.strip():  # rule 7
        state.remember(
            AgentExchange(turn.text, result.response, turn.timestamp_us, turn.turn_id, route)
        )
    return RouteResult(turn.turn_id, "answered", route, result.response)
