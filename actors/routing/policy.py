"""The router's turn policy, as a pure core: decisions in, actions out.

Why a separate class: the rules that decide a turn (focus, admission, one reroute after a
decline, clarification, release, the default, what the router says) are the subtle part
of the router, and they are testable without destinations, a decision service, a bus or
an event loop. ``AgentRouter`` gathers the routing aids, feeds the outcomes of its awaits
in here, and performs the actions it gets back (``tests/test_router_policy.py`` has a table
row for every rule of ``router.py``'s docstring).

Contract:

* One ``TurnPolicy`` per turn, over the participant's ``ParticipantRouting`` (focus and
  history, changed in place as the rules say) and every destination's ``RoutingAid``.
* Every input (``start``, ``decided``, ``admitted``, ``admit_failed``, ``answered``,
  ``answer_failed``) returns a list of actions to perform in order. The last one is a
  *question* whose outcome is the next input (``Decide`` -> ``decided``, ``Admit`` ->
  ``admitted`` or ``admit_failed``, ``Answer`` -> ``answered`` or ``answer_failed``) or
  ``Done``, the end of the turn. Before it come *effects* the shell performs and awaits:
  ``Release`` (tell a destination it lost focus), ``Say`` (router-owned text, before the
  destination starts) and ``Note`` (a log line).
* Nothing here awaits, logs or performs I/O; the shell keeps failures of its awaits out
  (a failing decision service is a None choice, a failing ``admit()`` is
  ``admit_failed``, a raising ``answer()`` is ``answer_failed``).

Rules 2 to 7 of ``router.py``'s docstring live here (rule 1, the lanes, is ``lanes.py``;
rules 8 and 9 are ``departure`` and ``turn_ended`` below).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import msgspec

from xrmq.schemas import (
    Admission,
    AgentExchange,
    AgentTurn,
    DestinationResult,
    RoutingAid,
    TurnEnded,
)

from .state import ParticipantRouting, candidates

RouteStatus = Literal["answered", "clarified", "unanswered", "failed", "canceled"]

INELIGIBLE = RoutingAid("unavailable", eligible=False)
"""The aid of a destination whose own aid could not be had."""

REROUTES = 1
"""Decisions after a decline: the first selection and this many reroutes (rule 4)."""


@dataclass(frozen=True, slots=True)
class RouterTexts:
    """What the router says itself when no destination can."""

    failure: str = "Sorry, something went wrong. Please try again."
    """A destination failed before its first output."""
    unavailable: str = "Sorry, I can't help with that."
    """No destination took the turn and none said why."""
    lost: str = "Sorry, I lost the rest of that answer."
    """A destination failed after its first output: said after its partial reply, so the
    listener never hears a sentence cut off without a word."""

    def __post_init__(self) -> None:
        for name in ("failure", "unavailable", "lost"):
            if not getattr(self, name).strip():
                raise ValueError(f"RouterTexts.{name}: must be non-empty text")


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


# -- actions ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Release:
    """Effect: call ``route``'s ``release(participant)``: the router dropped its focus."""

    route: str


@dataclass(frozen=True, slots=True)
class Say:
    """Effect: say router-owned ``text`` for the turn; ``route`` is the destination it
    concerns (None: no destination is involved)."""

    route: str | None
    text: str


@dataclass(frozen=True, slots=True)
class Note:
    """Effect: a log line for the shell (``level`` is a structlog method name)."""

    event: str
    level: Literal["info", "warning", "error"] = "info"
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decide:
    """Question: which of ``candidates`` (eligible, not excluded) should take the turn?"""

    candidates: Mapping[str, RoutingAid]


@dataclass(frozen=True, slots=True)
class Admit:
    """Question: ``route``'s admission of the turn (``focused``: it holds the focus)."""

    route: str
    focused: bool


@dataclass(frozen=True, slots=True)
class Answer:
    """Question: ``route``'s answer (``fallback``: the default, without admission)."""

    route: str
    focused: bool
    fallback: bool = False


@dataclass(frozen=True, slots=True)
class Done:
    """The turn ended with ``result``."""

    result: RouteResult


Effect = Release | Say | Note
Question = Decide | Admit | Answer
Action = Effect | Question | Done

Q = TypeVar("Q", Decide, Admit, Answer)


class TurnPolicy:
    """Route one turn by the rules (``router.py`` rules 2 to 7); see the module docstring.

    ``aids`` is every destination's aid in registration order (``INELIGIBLE`` for one
    that could not be asked); ``unreachable`` the reason for each of those, reported when
    the turn goes unanswered. ``default`` names the fallback destination.
    """

    __slots__ = (
        "_aids",
        "_decisions_left",
        "_decline_text",
        "_default",
        "_excluded",
        "_pending",
        "_state",
        "_texts",
        "_why",
        "turn",
    )

    def __init__(
        self,
        turn: AgentTurn,
        state: ParticipantRouting,
        aids: Mapping[str, RoutingAid],
        *,
        default: str | None = None,
        texts: RouterTexts = RouterTexts(),
        unreachable: Mapping[str, str] | None = None,
    ) -> None:
        self.turn = msgspec.structs.replace(turn, history=tuple(state.history))
        """The turn as every destination receives it: with the shared history (rule 7)."""
        self._state = state
        self._aids = aids
        self._default = default
        self._texts = texts
        self._why: dict[str, str] = dict(unreachable or {})
        self._excluded: set[str] = set()
        self._decline_text: str | None = None
        self._decisions_left = 1 + REROUTES
        self._pending: Question | None = None

    # -- inputs -----------------------------------------------------------------------------

    def start(self) -> list[Action]:
        """Rule 2: the focus holder first while it is eligible; else rule 3, a decision."""
        state = self._state
        holder = state.focus
        if holder is None:
            return self._select([])
        if self._aids.get(holder, INELIGIBLE).eligible:
            return self._ask(Admit(holder, focused=True), [])
        state.clear_focus(holder)
        return self._select(
            [
                Note("router.focus_lost", fields={"route": holder, "reason": "ineligible"}),
                Release(holder),
            ]
        )

    def decided(self, choice: str | None) -> list[Action]:
        """Rule 3: the decision service chose ``choice`` (None: none fits, or it failed)."""
        asked = self._expect(Decide)
        if choice is None:
            return self._fallback([])
        if choice not in asked.candidates:
            note = Note(
                "router.decision_invalid",
                "warning",
                {"choice": choice, "candidates": sorted(asked.candidates)},
            )
            return self._fallback([note])
        return self._ask(Admit(choice, focused=choice == self._state.focus), [])

    def admitted(self, admission: Admission) -> list[Action]:
        """Rule 4: the chosen destination's admission, before any speech or work."""
        asked = self._expect(Admit)
        name, focused, state = asked.route, asked.focused, self._state
        text = admission.text
        actions: list[Action] = [
            Note(
                "router.admission",
                fields={
                    "route": name,
                    "disposition": admission.disposition,
                    "focused": focused,
                },
            )
        ]
        if admission.disposition == "accept":
            if admission.focus:
                actions += self._take_focus(name)
            if text.strip():
                actions.append(Say(name, text))
            return self._ask(Answer(name, focused), actions)
        if admission.disposition == "clarify":
            actions.append(Say(name, text))
            self._remember(text, name)
            return self._done(RouteResult(self.turn.turn_id, "clarified", name, text), actions)
        if admission.disposition == "release" and focused:
            state.clear_focus(name)
            actions.append(Note("router.focus_released", fields={"route": name}))
        else:  # a decline, or a release from a destination without the focus
            self._excluded.add(name)
            self._why[name] = "declined" + (f" ({text.strip()})" if text.strip() else "")
            if text.strip():
                self._decline_text = text
        return self._select(actions)

    def admit_failed(self) -> list[Action]:
        """A failing ``admit()`` counts as a decline (rule 4)."""
        return self.admitted(Admission("decline"))

    def answered(self, result: object) -> list[Action]:
        """The destination's answer returned ``result``: its focus transition (rule 2) and
        the exchange for the shared history (rule 7)."""
        asked = self._expect(Answer)
        name, turn = asked.route, self.turn
        if not isinstance(result, DestinationResult):
            kind = type(result).__name__
            note = Note("router.answer_invalid", "error", {"route": name, "result": kind})
            failed = RouteResult(
                turn.turn_id, "failed", name, error=f"InvalidResult: answer returned {kind}"
            )
            return self._done(failed, [note])
        actions: list[Action] = []
        if result.focus == "take":
            actions += self._take_focus(name)
        elif result.focus == "release" and self._state.clear_focus(name):
            actions.append(Note("router.focus_released", fields={"route": name}))
        if result.response is not None and result.response.strip():
            self._remember(result.response, name)
        return self._done(RouteResult(turn.turn_id, "answered", name, result.response), actions)

    def answer_failed(self, cause: str, *, started: bool) -> list[Action]:
        """The destination's answer raised ``cause`` (``"<Kind>: <message>"``); rule 6: the
        router says its failure text if the destination had not started, else its apology
        for the rest of the answer (after the partial reply the destination finalized)."""
        asked = self._expect(Answer)
        text = self._texts.lost if started else self._texts.failure
        actions: list[Action] = [Say(asked.route, text)]
        failed = RouteResult(self.turn.turn_id, "failed", asked.route, error=cause)
        return self._done(failed, actions)

    # -- the rules' steps -------------------------------------------------------------------

    def _select(self, actions: list[Action]) -> list[Action]:
        """Rule 3 (and rule 4's one reroute): a decision among the candidates left."""
        choices = candidates(self._aids, self._excluded)
        if self._decisions_left == 0 or not choices:
            return self._fallback(actions)
        self._decisions_left -= 1
        return self._ask(Decide(choices), actions)

    def _fallback(self, actions: list[Action]) -> list[Action]:
        """Rule 5: the eligible default that has not declined answers without admission;
        else the router says the last decline's text or ``unavailable``."""
        default = self._default
        if (
            default is not None
            and default not in self._excluded
            and self._aids.get(default, INELIGIBLE).eligible
        ):
            actions.append(Note("router.fallback", fields={"route": default}))
            return self._ask(Answer(default, focused=False, fallback=True), actions)
        text = self._decline_text or self._texts.unavailable
        actions.append(Say(None, text))
        for name, aid in self._aids.items():
            if not aid.eligible:
                self._why.setdefault(name, "not eligible")
        reasons = (
            "; ".join(f"{name}: {reason}" for name, reason in self._why.items())
            or "no destination was chosen"
        )
        unanswered = RouteResult(
            self.turn.turn_id, "unanswered", None, text, error=f"NoDestination: {reasons}"
        )
        return self._done(unanswered, actions)

    def _take_focus(self, name: str) -> list[Action]:
        """Rule 2: ``name`` takes the focus; a previous holder is released."""
        previous = self._state.take_focus(name)
        actions: list[Action] = [
            Note("router.focus_taken", fields={"route": name, "previous": previous})
        ]
        if previous is not None:
            actions.append(Release(previous))
        return actions

    def _remember(self, response: str, route: str) -> None:
        turn = self.turn
        self._state.remember(
            AgentExchange(turn.text, response, turn.timestamp_us, turn.turn_id, route)
        )

    def _ask(self, question: Question, actions: list[Action]) -> list[Action]:
        self._pending = question
        actions.append(question)
        return actions

    def _done(self, result: RouteResult, actions: list[Action]) -> list[Action]:
        self._pending = None
        actions.append(Done(result))
        return actions

    def _expect(self, kind: type[Q]) -> Q:
        pending = self._pending
        if not isinstance(pending, kind):
            raise RuntimeError(
                f"TurnPolicy: got the outcome of {kind.__name__}, but the pending question is "
                f"{type(pending).__name__ if pending is not None else 'none (the turn ended)'}"
            )
        return pending


# -- the participant's departure and the turn's end (rules 8 and 9) ------------------------


@dataclass(frozen=True, slots=True)
class Forget:
    """Forget the participant's focus and history."""


@dataclass(frozen=True, slots=True)
class Left:
    """Call ``route``'s ``participant_left(participant)`` (its failure is logged, the
    departure goes on)."""

    route: str


@dataclass(frozen=True, slots=True)
class Cleanup:
    """Run the router's ``cleanup_participant(participant)``."""


Departure = Forget | Left | Cleanup


def departure(routes: Iterable[str], *, cleanup: bool) -> list[Departure]:
    """Rule 8: what a departure does, in order, once the participant's turns drained:
    forget focus and history, tell every destination, then the cleanup (if any)."""
    steps: list[Departure] = [Forget()]
    steps += [Left(route) for route in routes]
    if cleanup:
        steps.append(Cleanup())
    return steps


def turn_ended(result: RouteResult) -> TurnEnded:
    """Rule 9: the ``TurnEnded`` a turn's ``result`` is reported as (with the cause of a
    failed or unanswered turn)."""
    return TurnEnded(result.turn_id, result.status, result.route, result.error)
