"""The router's turn policy, pure (``actors/routing/policy.py``): one table row per rule.

Each row scripts the outcomes (decisions, admissions, answers) and lists the actions the
policy must ask for, in order, and how the turn ends. Rules 2-7 of ``routing/router.py``
are the policy's; rules 1 (one turn at a time per participant) and 8 (departure) are the
router's lanes around it, tested through the router in ``tests/test_router.py``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pytest

from xrmq.actors.routing.policy import (
    Admit,
    Answer,
    Answered,
    Decide,
    Note,
    Release,
    RouteResult,
    Say,
    turn_policy,
)
from xrmq.actors.routing.state import ParticipantRouting
from xrmq.schemas import Admission, AgentExchange, AgentTurn, DestinationResult, RoutingAid
from xrmq.schemas.routing import FocusTransition

UNAVAILABLE = "Sorry, I can't help with that."
FAILURE = "Sorry, something went wrong."
ELIGIBLE = RoutingAid("a destination")
INELIGIBLE = RoutingAid("unavailable", eligible=False)


def answered(
    route: str, *, focus: FocusTransition | None = None, response: str | None = "ok"
) -> Answered:
    return Answered(DestinationResult(response=response, focus=focus), began=True)


@dataclass
class Script:
    """The outcomes the policy is sent, and where it starts."""

    aids: dict[str, RoutingAid] = field(default_factory=lambda: {"a": ELIGIBLE, "b": ELIGIBLE})
    focus: str | None = None
    decisions: list[str | None] = field(default_factory=list)
    admissions: dict[str, list[Admission]] = field(default_factory=dict)
    answers: dict[str, Answered] = field(default_factory=dict)
    default: str | None = None
    history: list[AgentExchange] = field(default_factory=list)
    history_limit: int = 8


def run(
    script: Script,
    text: str = "hello",
    turn_id: str = "t1",
    state: ParticipantRouting | None = None,
) -> tuple[list[tuple[Any, ...]], RouteResult, ParticipantRouting, list[Any]]:
    """Drive the policy: (the actions as tuples, the result, the state, every action)."""
    if state is None:
        state = ParticipantRouting(script.history_limit)
        state.focus = script.focus
        for exchange in script.history:
            state.remember(exchange)
    decisions = deque(script.decisions)
    admissions = {route: deque(items) for route, items in script.admissions.items()}
    policy = turn_policy(
        AgentTurn("p1", turn_id, text, timestamp_us=1),
        state,
        script.aids,
        default=script.default,
        unavailable=UNAVAILABLE,
        failure=FAILURE,
    )
    trace: list[tuple[Any, ...]] = []
    actions: list[Any] = []
    outcome: Any = None
    while True:
        try:
            action = policy.send(outcome)
        except StopIteration as done:
            return trace, done.value, state, actions
        actions.append(action)
        outcome = None
        if isinstance(action, Decide):
            trace.append(("decide", tuple(action.choices)))
            outcome = decisions.popleft() if decisions else None
        elif isinstance(action, Admit):
            trace.append(("admit", action.route, action.focused))
            queue = admissions.get(action.route)
            outcome = queue.popleft() if queue else Admission("accept")
        elif isinstance(action, Answer):
            trace.append(("answer", action.route, action.focused))
            outcome = script.answers.get(action.route, answered(action.route))
        elif isinstance(action, Say):
            trace.append(("say", action.route, action.text))
        elif isinstance(action, Release):
            trace.append(("release", action.route))
        else:
            assert isinstance(action, Note)


ACCEPT, DECLINE = Admission("accept"), Admission("decline")

# (rule, what it shows, script, expected actions, expected (status, route), focus after)
TABLE = [
    (
        "2",
        "the focus holder is tried first, without a decision, and keeps focus",
        Script(focus="a"),
        [("admit", "a", True), ("answer", "a", True)],
        ("answered", "a"),
        "a",
    ),
    (
        "2",
        "a focus holder that became ineligible loses focus, is released, then the rest decide",
        Script(focus="a", aids={"a": INELIGIBLE, "b": ELIGIBLE}, decisions=["b"]),
        [("release", "a"), ("decide", ("b",)), ("admit", "b", False), ("answer", "b", False)],
        ("answered", "b"),
        None,
    ),
    (
        "2",
        "declining does not clear focus",
        Script(focus="a", admissions={"a": [DECLINE]}, decisions=["b"]),
        [("admit", "a", True), ("decide", ("b",)), ("admit", "b", False), ("answer", "b", False)],
        ("answered", "b"),
        "a",
    ),
    (
        "2",
        "a release admission from the holder clears focus and routes the same turn normally",
        Script(focus="a", admissions={"a": [Admission("release")]}, decisions=["b"]),
        [
            ("admit", "a", True),
            ("decide", ("a", "b")),
            ("admit", "b", False),
            ("answer", "b", False),
        ],
        ("answered", "b"),
        None,
    ),
    (
        "2",
        "a result that releases gives the focus up after the answer",
        Script(focus="a", answers={"a": answered("a", focus="release")}),
        [("admit", "a", True), ("answer", "a", True)],
        ("answered", "a"),
        None,
    ),
    (
        "2",
        "a result that takes focus releases the previous holder",
        Script(
            focus="a",
            admissions={"a": [DECLINE]},
            decisions=["b"],
            answers={"b": answered("b", focus="take")},
        ),
        [
            ("admit", "a", True),
            ("decide", ("b",)),
            ("admit", "b", False),
            ("answer", "b", False),
            ("release", "a"),
        ],
        ("answered", "b"),
        "b",
    ),
    (
        "2",
        "an accept with focus takes it, and the previous holder is released before the answer",
        Script(
            focus="a",
            admissions={"a": [DECLINE], "b": [Admission("accept", focus=True)]},
            decisions=["b"],
        ),
        [
            ("admit", "a", True),
            ("decide", ("b",)),
            ("admit", "b", False),
            ("release", "a"),
            ("answer", "b", False),
        ],
        ("answered", "b"),
        "b",
    ),
    (
        "3",
        "the decision service chooses among the eligible destinations only",
        Script(aids={"a": INELIGIBLE, "b": ELIGIBLE}, decisions=["b"]),
        [("decide", ("b",)), ("admit", "b", False), ("answer", "b", False)],
        ("answered", "b"),
        None,
    ),
    (
        "3",
        "a choice that is not a candidate is no choice",
        Script(aids={"a": INELIGIBLE, "b": ELIGIBLE}, decisions=["a"]),
        [("decide", ("b",)), ("say", None, UNAVAILABLE)],
        ("unanswered", None),
        None,
    ),
    (
        "3",
        "no eligible destination: no decision is asked for",
        Script(aids={"a": INELIGIBLE}),
        [("say", None, UNAVAILABLE)],
        ("unanswered", None),
        None,
    ),
    (
        "4",
        "accept answers; its text is an acknowledgement said before the answer",
        Script(decisions=["a"], admissions={"a": [Admission("accept", text="On it.")]}),
        [
            ("decide", ("a", "b")),
            ("admit", "a", False),
            ("say", "a", "On it."),
            ("answer", "a", False),
        ],
        ("answered", "a"),
        None,
    ),
    (
        "4",
        "a decline excludes the destination and allows exactly one reroute",
        Script(
            aids={"a": ELIGIBLE, "b": ELIGIBLE, "c": ELIGIBLE},
            decisions=["a", "b", "c"],
            admissions={"a": [DECLINE], "b": [Admission("decline", text="Not me.")]},
        ),
        [
            ("decide", ("a", "b", "c")),
            ("admit", "a", False),
            ("decide", ("b", "c")),
            ("admit", "b", False),
            ("say", None, "Not me."),
        ],
        ("unanswered", None),
        None,
    ),
    (
        "4",
        "clarify ends the turn with the router saying the question",
        Script(decisions=["a"], admissions={"a": [Admission("clarify", text="Which lab?")]}),
        [("decide", ("a", "b")), ("admit", "a", False), ("say", "a", "Which lab?")],
        ("clarified", "a"),
        None,
    ),
    (
        "4",
        "release from a destination without focus counts as a decline",
        Script(decisions=["a", "b"], admissions={"a": [Admission("release")]}),
        [
            ("decide", ("a", "b")),
            ("admit", "a", False),
            ("decide", ("b",)),
            ("admit", "b", False),
            ("answer", "b", False),
        ],
        ("answered", "b"),
        None,
    ),
    (
        "5",
        "after the declines, an eligible default answers without admission",
        Script(
            aids={"a": ELIGIBLE, "b": ELIGIBLE, "c": ELIGIBLE},
            default="c",
            decisions=["a", "b"],
            admissions={"a": [DECLINE], "b": [DECLINE]},
        ),
        [
            ("decide", ("a", "b", "c")),
            ("admit", "a", False),
            ("decide", ("b", "c")),
            ("admit", "b", False),
            ("answer", "c", False),
        ],
        ("answered", "c"),
        None,
    ),
    (
        "5",
        "no choice at all goes to the default",
        Script(default="b"),
        [("decide", ("a", "b")), ("answer", "b", False)],
        ("answered", "b"),
        None,
    ),
    (
        "5",
        "a default that declined gets no fallback attempt; the decline's text is said",
        Script(default="a", decisions=["a"], admissions={"a": [Admission("decline", text="No.")]}),
        [("decide", ("a", "b")), ("admit", "a", False), ("decide", ("b",)), ("say", None, "No.")],
        ("unanswered", None),
        None,
    ),
    (
        "5",
        "an ineligible default gets no fallback; without a decline text, unavailable",
        Script(
            aids={"a": ELIGIBLE, "b": INELIGIBLE},
            default="b",
            decisions=["a"],
            admissions={"a": [DECLINE]},
        ),
        [("decide", ("a",)), ("admit", "a", False), ("say", None, UNAVAILABLE)],
        ("unanswered", None),
        None,
    ),
    (
        "6",
        "a failure before the first output is said by the router",
        Script(decisions=["a"], answers={"a": Answered(error="RuntimeError('down')", began=False)}),
        [
            ("decide", ("a", "b")),
            ("admit", "a", False),
            ("answer", "a", False),
            ("say", "a", FAILURE),
        ],
        ("failed", "a"),
        None,
    ),
    (
        "6",
        "a failure after the first output is left to the destination",
        Script(decisions=["a"], answers={"a": Answered(error="RuntimeError('mid')", began=True)}),
        [("decide", ("a", "b")), ("admit", "a", False), ("answer", "a", False)],
        ("failed", "a"),
        None,
    ),
    (
        "6",
        "an answer that returns no DestinationResult failed",
        Script(decisions=["a"], answers={"a": Answered(result="text", began=True)}),
        [("decide", ("a", "b")), ("admit", "a", False), ("answer", "a", False)],
        ("failed", "a"),
        None,
    ),
]


@pytest.mark.parametrize(
    ("rule", "shows", "script", "actions", "ends", "focus"),
    TABLE,
    ids=[f"rule {row[0]}: {row[1]}" for row in TABLE],
)
def test_rule(
    rule: str,
    shows: str,
    script: Script,
    actions: list[tuple[Any, ...]],
    ends: tuple[str, str | None],
    focus: str | None,
) -> None:
    trace, result, state, _ = run(script)
    assert trace == actions
    assert (result.status, result.route) == ends
    assert state.focus == focus


def test_rule_6_failures_and_invalid_results_carry_their_error() -> None:
    failed = run(Script(decisions=["a"], answers={"a": Answered(error="E('x')")}))[1]
    invalid = run(Script(decisions=["a"], answers={"a": Answered(result=3, began=True)}))[1]
    assert (failed.error, invalid.error) == ("E('x')", "InvalidResult: answer returned int")


def test_an_unanswered_turn_says_why_each_destination_did_not_answer() -> None:
    aids = {"a": ELIGIBLE, "b": INELIGIBLE, "c": INELIGIBLE}
    policy = turn_policy(
        AgentTurn("p1", "t1", "hi"),
        ParticipantRouting(8),
        aids,
        default=None,
        unavailable=UNAVAILABLE,
        failure=FAILURE,
        unreachable={"c": "unreachable (TimeoutError: no reply)"},
    )
    outcome: Any = None
    while True:
        try:
            action = policy.send(outcome)
        except StopIteration as done:
            result = done.value
            break
        outcome = {Decide: "a", Admit: Admission("decline", text="Not me.")}.get(type(action))
    assert result.error == (
        "NoDestination: c: unreachable (TimeoutError: no reply); "
        "a: declined (Not me.); b: not eligible"
    )
    assert run(Script(aids={"a": INELIGIBLE}))[1].error == "NoDestination: a: not eligible"


def test_rule_7_every_destination_sees_the_same_history_without_the_current_turn() -> None:
    earlier = AgentExchange("before", "answer", 0, "t0", "a")
    script = Script(history=[earlier], decisions=["a", "b"], admissions={"a": [DECLINE]})
    _, _, _, actions = run(script)
    seen = [
        action.turn.history for action in actions if isinstance(action, Admit | Answer | Decide)
    ]
    assert seen and all(history == (earlier,) for history in seen)


def test_rule_7_history_keeps_answers_and_clarifications_not_failures_or_empty_answers() -> None:
    state = ParticipantRouting(8)
    run(Script(decisions=["a"]), "q1", "t1", state)
    run(
        Script(decisions=["a"], admissions={"a": [Admission("clarify", text="Which?")]}),
        "q2",
        "t2",
        state,
    )
    run(Script(decisions=["a"], answers={"a": Answered(error="E()")}), "q3", "t3", state)
    run(Script(decisions=["a"], answers={"a": answered("a", response="  ")}), "q4", "t4", state)
    assert [(e.request, e.response, e.exchange_id) for e in state.history] == [
        ("q1", "ok", "t1"),
        ("q2", "Which?", "t2"),
    ]


def test_rule_7_history_is_bounded_by_its_limit() -> None:
    state = ParticipantRouting(2)
    for index in range(3):
        run(Script(decisions=["a"]), f"q{index}", f"t{index}", state)
    assert [e.exchange_id for e in state.history] == ["t1", "t2"]
    assert run(Script(decisions=["a"]), state=ParticipantRouting(0))[2].history == deque()
