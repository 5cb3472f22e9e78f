"""The router's rules, pure: table rows named after each rule of ``routing/router.py``'s
docstring (rule 1 on ``Lanes``, rules 2 to 7 on ``TurnPolicy``, rules 8 and 9 on
``departure`` and ``turn_ended``). No destinations, no decision service, no event loop:
each row scripts the outcomes of the policy's questions and reads the actions back."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from xrmq.actors.routing.lanes import Lane, Lanes
from xrmq.actors.routing.policy import (
    INELIGIBLE,
    Action,
    Admit,
    Answer,
    Cleanup,
    Decide,
    Done,
    Forget,
    Left,
    Note,
    Release,
    RouteResult,
    RouterTexts,
    Say,
    TurnPolicy,
    departure,
    turn_ended,
)
from xrmq.actors.routing.state import ParticipantRouting
from xrmq.schemas import (
    Admission,
    AgentExchange,
    AgentTurn,
    DestinationResult,
    RoutingAid,
    TurnEnded,
)

TEXTS = RouterTexts(failure="FAILURE", unavailable="UNAVAILABLE", lost="LOST")
ON = RoutingAid("a destination")
TURN = AgentTurn("p1", "t1", "hello", timestamp_us=7)
EARLIER = AgentExchange("before", "earlier answer", 1, "t0", "a")

ACCEPT = Admission("accept")
DECLINE = Admission("decline")
FAIL = "fail"
"""An admission script: ``admit()`` raised (the shell calls ``admit_failed``)."""
BEFORE = "raise before started"
AFTER = "raise after started"
"""Answer scripts: ``answer()`` raised before / after its ``started()``."""


def aids(*eligible: str, off: tuple[str, ...] = ()) -> dict[str, RoutingAid]:
    """Destinations in registration order: ``eligible`` ones, then the ``off`` (ineligible)."""
    return {**dict.fromkeys(eligible, ON), **dict.fromkeys(off, INELIGIBLE)}


def answer(response: str | None = "ok", focus: str | None = None) -> DestinationResult:
    return DestinationResult(response=response, focus=focus)  # type: ignore[arg-type]


@dataclass
class Row:
    trace: list[str]
    """The actions, Notes left out, as ``show`` writes them."""
    result: tuple[str, str | None]
    """(status, route) of the turn."""
    aids: dict[str, RoutingAid] = field(default_factory=lambda: aids("a", "b", "c"))
    focus: str | None = None
    default: str | None = None
    decisions: tuple[str | None, ...] = ()
    admissions: Mapping[str, tuple[Admission | str, ...]] = field(default_factory=dict)
    answers: Mapping[str, tuple[DestinationResult | str | int, ...]] = field(default_factory=dict)
    focus_after: str | None = "unchanged"
    """The focus after the turn ("unchanged": as before)."""
    history: tuple[tuple[str, str], ...] | None = None
    """(destination, response) of the exchanges remembered by the turn (None: not checked)."""
    response: str | None = "unchecked"
    error: str | None = "unchecked"
    unreachable: Mapping[str, str] = field(default_factory=dict)
    history_limit: int = 8


def show(action: Action) -> str:
    if isinstance(action, Decide):
        return "decide " + ",".join(action.candidates)
    if isinstance(action, Admit):
        return f"admit {action.route}" + (" focused" if action.focused else "")
    if isinstance(action, Answer):
        return (
            f"answer {action.route}"
            + (" focused" if action.focused else "")
            + (" fallback" if action.fallback else "")
        )
    if isinstance(action, Say):
        return f"say {action.route or 'router'}: {action.text}"
    if isinstance(action, Release):
        return f"release {action.route}"
    if isinstance(action, Done):
        return f"done {action.result.status}"
    raise AssertionError(action)


def drive(row: Row) -> tuple[list[str], list[Note], RouteResult, TurnPolicy, ParticipantRouting]:
    """Run a turn, answering each question from the row's scripts (an unscripted admission
    accepts, an unscripted answer answers ``"<route> answers"``)."""
    state = ParticipantRouting(row.history_limit)
    state.remember(EARLIER)
    state.focus = row.focus
    policy = TurnPolicy(
        TURN, state, row.aids, default=row.default, texts=TEXTS, unreachable=row.unreachable
    )
    decisions = deque(row.decisions)
    admissions = {name: deque(script) for name, script in row.admissions.items()}
    answers = {name: deque(script) for name, script in row.answers.items()}
    trace: list[str] = []
    notes: list[Note] = []
    actions = policy.start()
    for _ in range(20):
        *effects, question = actions
        for effect in effects:
            assert not isinstance(effect, (Decide, Admit, Answer, Done)), actions
            if isinstance(effect, Note):
                notes.append(effect)
            else:
                trace.append(show(effect))
        trace.append(show(question))
        if isinstance(question, Done):
            return trace, notes, question.result, policy, state
        if isinstance(question, Decide):
            actions = policy.decided(decisions.popleft())
        elif isinstance(question, Admit):
            admitting = admissions.get(question.route)
            admission = admitting.popleft() if admitting else ACCEPT
            if isinstance(admission, Admission):
                actions = policy.admitted(admission)
            else:
                assert admission == FAIL
                actions = policy.admit_failed()
        elif isinstance(question, Answer):
            answering = answers.get(question.route)
            outcome = answering.popleft() if answering else answer(f"{question.route} answers")
            if outcome in (BEFORE, AFTER):
                actions = policy.answer_failed("Boom: it broke", started=outcome == AFTER)
            else:
                actions = policy.answered(outcome)
    raise AssertionError(f"the turn never ended: {trace}")


ROWS = {
    # -- rule 2: focus ---------------------------------------------------------------------
    "rule 2: the focus holder is tried first and keeps focus": Row(
        focus="a",
        trace=["admit a focused", "answer a focused", "done answered"],
        result=("answered", "a"),
        focus_after="a",
    ),
    "rule 2: a focus holder that became ineligible loses focus and is released": Row(
        aids=aids("b", "c", off=("a",)),
        focus="a",
        decisions=("b",),
        trace=["release a", "decide b,c", "admit b", "answer b", "done answered"],
        result=("answered", "b"),
        focus_after=None,
    ),
    "rule 2: declining does not clear focus": Row(
        focus="a",
        admissions={"a": (DECLINE,)},
        decisions=("b",),
        trace=["admit a focused", "decide b,c", "admit b", "answer b", "done answered"],
        result=("answered", "b"),
        focus_after="a",
    ),
    "rule 2: an admission that takes focus releases the previous holder": Row(
        focus="a",
        admissions={"a": (DECLINE,), "b": (Admission("accept", focus=True),)},
        decisions=("b",),
        trace=[
            "admit a focused",
            "decide b,c",
            "admit b",
            "release a",
            "answer b",
            "done answered",
        ],
        result=("answered", "b"),
        focus_after="b",
    ),
    "rule 2: a result that takes focus releases the previous holder": Row(
        focus="a",
        admissions={"a": (DECLINE,)},
        decisions=("b",),
        answers={"b": (answer(focus="take"),)},
        trace=[
            "admit a focused",
            "decide b,c",
            "admit b",
            "answer b",
            "release a",
            "done answered",
        ],
        result=("answered", "b"),
        focus_after="b",
    ),
    "rule 2: taking focus again releases nobody": Row(
        focus="a",
        answers={"a": (answer(focus="take"),)},
        trace=["admit a focused", "answer a focused", "done answered"],
        result=("answered", "a"),
        focus_after="a",
    ),
    "rule 2: a result that releases gives up focus after the answer": Row(
        focus="a",
        answers={"a": (answer(focus="release"),)},
        trace=["admit a focused", "answer a focused", "done answered"],
        result=("answered", "a"),
        focus_after=None,
    ),
    "rule 2: a release result from a destination without focus changes nothing": Row(
        focus="a",
        admissions={"a": (DECLINE,)},
        decisions=("b",),
        answers={"b": (answer(focus="release"),)},
        trace=["admit a focused", "decide b,c", "admit b", "answer b", "done answered"],
        result=("answered", "b"),
        focus_after="a",
    ),
    "rule 2: without focus a taking destination takes it and releases nobody": Row(
        decisions=("b",),
        answers={"b": (answer(focus="take"),)},
        trace=["decide a,b,c", "admit b", "answer b", "done answered"],
        result=("answered", "b"),
        focus_after="b",
    ),
    # -- rule 3: the decision service ------------------------------------------------------
    "rule 3: the decision service chooses among the eligible destinations": Row(
        aids=aids("a", "c", off=("b",)),
        decisions=("c",),
        trace=["decide a,c", "admit c", "answer c", "done answered"],
        result=("answered", "c"),
        focus_after=None,
    ),
    "rule 3: an unreachable destination is no candidate": Row(
        aids={"a": ON, "b": INELIGIBLE},
        unreachable={"b": "unreachable (TimeoutError: no reply)"},
        decisions=("a",),
        trace=["decide a", "admit a", "answer a", "done answered"],
        result=("answered", "a"),
    ),
    "rule 3: a failing decision service is no choice": Row(
        default="c",
        decisions=(None,),
        trace=["decide a,b,c", "answer c fallback", "done answered"],
        result=("answered", "c"),
    ),
    "rule 3: a choice that is not a candidate is no choice": Row(
        aids=aids("a", "c", off=("b",)),
        default="c",
        decisions=("b",),
        trace=["decide a,c", "answer c fallback", "done answered"],
        result=("answered", "c"),
    ),
    "rule 3: a choice that names no destination is no choice": Row(
        default="a",
        decisions=("zz",),
        trace=["decide a,b,c", "answer a fallback", "done answered"],
        result=("answered", "a"),
    ),
    # -- rule 4: admission -----------------------------------------------------------------
    "rule 4: accept answers": Row(
        decisions=("a",),
        trace=["decide a,b,c", "admit a", "answer a", "done answered"],
        result=("answered", "a"),
        response="a answers",
        error=None,
    ),
    "rule 4: accept with focus takes focus": Row(
        decisions=("a",),
        admissions={"a": (Admission("accept", focus=True),)},
        trace=["decide a,b,c", "admit a", "answer a", "done answered"],
        result=("answered", "a"),
        focus_after="a",
    ),
    "rule 4: an accept's text is an acknowledgement the router says first": Row(
        decisions=("a",),
        admissions={"a": (Admission("accept", "One moment."),)},
        trace=["decide a,b,c", "admit a", "say a: One moment.", "answer a", "done answered"],
        result=("answered", "a"),
    ),
    "rule 4: a blank acknowledgement is not said": Row(
        decisions=("a",),
        admissions={"a": (Admission("accept", "  "),)},
        trace=["decide a,b,c", "admit a", "answer a", "done answered"],
        result=("answered", "a"),
    ),
    "rule 4: decline excludes the destination and allows one reroute": Row(
        decisions=("a", "b"),
        admissions={"a": (DECLINE,)},
        trace=["decide a,b,c", "admit a", "decide b,c", "admit b", "answer b", "done answered"],
        result=("answered", "b"),
    ),
    "rule 4: only one reroute": Row(
        decisions=("a", "b"),
        admissions={"a": (DECLINE,), "b": (DECLINE,)},
        trace=[
            "decide a,b,c",
            "admit a",
            "decide b,c",
            "admit b",
            "say router: UNAVAILABLE",
            "done unanswered",
        ],
        result=("unanswered", None),
    ),
    "rule 4: clarify ends the turn with the router saying the question": Row(
        decisions=("a",),
        admissions={"a": (Admission("clarify", "Which room?"),)},
        trace=["decide a,b,c", "admit a", "say a: Which room?", "done clarified"],
        result=("clarified", "a"),
        response="Which room?",
        history=(("a", "Which room?"),),
    ),
    "rule 4: release from the focus holder clears focus and routes the same turn": Row(
        focus="a",
        admissions={"a": (Admission("release"),)},
        decisions=("a",),
        trace=["admit a focused", "decide a,b,c", "admit a", "answer a", "done answered"],
        result=("answered", "a"),
        focus_after=None,
    ),
    "rule 4: release from anyone else counts as a decline": Row(
        decisions=("a", "b"),
        admissions={"a": (Admission("release"),)},
        trace=["decide a,b,c", "admit a", "decide b,c", "admit b", "answer b", "done answered"],
        result=("answered", "b"),
        focus_after=None,
    ),
    "rule 4: a failing admit counts as a decline": Row(
        decisions=("a", "b"),
        admissions={"a": (FAIL,)},
        trace=["decide a,b,c", "admit a", "decide b,c", "admit b", "answer b", "done answered"],
        result=("answered", "b"),
    ),
    # -- rule 5: the default ---------------------------------------------------------------
    "rule 5: after the declines the eligible default answers without admission": Row(
        default="c",
        decisions=("a", "b"),
        admissions={"a": (DECLINE,), "b": (DECLINE,)},
        trace=[
            "decide a,b,c",
            "admit a",
            "decide b,c",
            "admit b",
            "answer c fallback",
            "done answered",
        ],
        result=("answered", "c"),
    ),
    "rule 5: no choice goes to the default": Row(
        default="b",
        decisions=(None,),
        trace=["decide a,b,c", "answer b fallback", "done answered"],
        result=("answered", "b"),
    ),
    "rule 5: with no candidate at all the default is not asked twice": Row(
        aids=aids("a"),
        default="a",
        admissions={"a": (DECLINE,)},
        decisions=("a",),
        trace=["decide a", "admit a", "say router: UNAVAILABLE", "done unanswered"],
        result=("unanswered", None),
    ),
    "rule 5: a default that declined gets no fallback attempt": Row(
        default="a",
        decisions=("a", "b"),
        admissions={"a": (DECLINE,), "b": (DECLINE,)},
        trace=[
            "decide a,b,c",
            "admit a",
            "decide b,c",
            "admit b",
            "say router: UNAVAILABLE",
            "done unanswered",
        ],
        result=("unanswered", None),
    ),
    "rule 5: an ineligible default gets no fallback attempt": Row(
        aids=aids("a", off=("d",)),
        default="d",
        decisions=(None,),
        trace=["decide a", "say router: UNAVAILABLE", "done unanswered"],
        result=("unanswered", None),
        error="NoDestination: d: not eligible",
    ),
    "rule 5: without a default the router says the last decline's text": Row(
        decisions=("a", "b"),
        admissions={"a": (Admission("decline", "Not me."),), "b": (Admission("decline", "No."),)},
        trace=[
            "decide a,b,c",
            "admit a",
            "decide b,c",
            "admit b",
            "say router: No.",
            "done unanswered",
        ],
        result=("unanswered", None),
        response="No.",
    ),
    "rule 5: a later decline without text keeps the earlier decline's text": Row(
        decisions=("a", "b"),
        admissions={"a": (Admission("decline", "Not me."),), "b": (DECLINE,)},
        trace=[
            "decide a,b,c",
            "admit a",
            "decide b,c",
            "admit b",
            "say router: Not me.",
            "done unanswered",
        ],
        result=("unanswered", None),
        error="NoDestination: a: declined (Not me.); b: declined",
    ),
    "rule 5: an unanswered turn names every destination's reason": Row(
        aids={"a": ON, "b": INELIGIBLE, "c": INELIGIBLE},
        unreachable={"b": "unreachable (TimeoutError: no reply)"},
        decisions=("a",),
        admissions={"a": (DECLINE,)},
        trace=["decide a", "admit a", "say router: UNAVAILABLE", "done unanswered"],
        result=("unanswered", None),
        response="UNAVAILABLE",
        error=(
            "NoDestination: b: unreachable (TimeoutError: no reply); a: declined; c: not eligible"
        ),
    ),
    "rule 5: when nothing was chosen the unanswered turn says so": Row(
        decisions=(None,),
        trace=["decide a,b,c", "say router: UNAVAILABLE", "done unanswered"],
        result=("unanswered", None),
        error="NoDestination: no destination was chosen",
    ),
    "rule 5: with no eligible destination nothing is decided": Row(
        aids=aids(off=("a", "b")),
        trace=["say router: UNAVAILABLE", "done unanswered"],
        result=("unanswered", None),
        error="NoDestination: a: not eligible; b: not eligible",
    ),
    # -- rule 6: router-owned text ---------------------------------------------------------
    "rule 6: router text is said before the destination starts": Row(
        focus="a",
        admissions={"a": (Admission("accept", "Let me check.", focus=True),)},
        trace=["admit a focused", "say a: Let me check.", "answer a focused", "done answered"],
        result=("answered", "a"),
    ),
    "rule 6: a failure before the first output is said by the router": Row(
        decisions=("a",),
        answers={"a": (BEFORE,)},
        trace=["decide a,b,c", "admit a", "answer a", "say a: FAILURE", "done failed"],
        result=("failed", "a"),
        error="Boom: it broke",
        history=(),
    ),
    "rule 6: a failure after the first output ends with the router's apology": Row(
        decisions=("a",),
        answers={"a": (AFTER,)},
        trace=["decide a,b,c", "admit a", "answer a", "say a: LOST", "done failed"],
        result=("failed", "a"),
        error="Boom: it broke",
        history=(),
    ),
    "rule 6: a failing fallback answer is said by the router too": Row(
        default="b",
        decisions=(None,),
        answers={"b": (BEFORE,)},
        trace=["decide a,b,c", "answer b fallback", "say b: FAILURE", "done failed"],
        result=("failed", "b"),
    ),
    "rule 6: an answer that is not a DestinationResult fails the turn": Row(
        decisions=("a",),
        answers={"a": (42,)},
        trace=["decide a,b,c", "admit a", "answer a", "done failed"],
        result=("failed", "a"),
        error="InvalidResult: answer returned int",
        history=(),
    ),
    # -- rule 7: the shared history ---------------------------------------------------------
    "rule 7: an answer with response context is remembered": Row(
        decisions=("a",),
        answers={"a": (answer("the lights are on"),)},
        trace=["decide a,b,c", "admit a", "answer a", "done answered"],
        result=("answered", "a"),
        history=(("a", "the lights are on"),),
    ),
    "rule 7: an answer without response context is not remembered": Row(
        decisions=("a",),
        answers={"a": (answer(None),)},
        trace=["decide a,b,c", "admit a", "answer a", "done answered"],
        result=("answered", "a"),
        response=None,
        history=(),
    ),
    "rule 7: a blank response is not remembered": Row(
        decisions=("a",),
        answers={"a": (answer("  "),)},
        trace=["decide a,b,c", "admit a", "answer a", "done answered"],
        result=("answered", "a"),
        history=(),
    ),
    "rule 7: a fallback answer is remembered": Row(
        default="b",
        decisions=(None,),
        trace=["decide a,b,c", "answer b fallback", "done answered"],
        result=("answered", "b"),
        history=(("b", "b answers"),),
    ),
    "rule 7: a router-said unavailable text is not remembered": Row(
        decisions=(None,),
        trace=["decide a,b,c", "say router: UNAVAILABLE", "done unanswered"],
        result=("unanswered", None),
        history=(),
    ),
    "rule 7: the history is bounded": Row(
        history_limit=1,
        decisions=("a",),
        trace=["decide a,b,c", "admit a", "answer a", "done answered"],
        result=("answered", "a"),
        history=(("a", "a answers"),),
    ),
}


@pytest.mark.parametrize("row", list(ROWS.values()), ids=list(ROWS))
def test_turn_policy(row: Row) -> None:
    trace, notes, result, policy, state = drive(row)
    assert trace == row.trace
    assert (result.status, result.route) == row.result
    assert result.turn_id == TURN.turn_id
    focus_after = row.focus if row.focus_after == "unchanged" else row.focus_after
    assert state.focus == focus_after
    if row.response != "unchecked":
        assert result.response == row.response
    if row.error != "unchecked":
        assert result.error == row.error
    # rule 7: every destination got the turn with the history as it was before the turn
    assert policy.turn.history == (EARLIER,)
    if row.history is not None:
        added = [(e.destination, e.response) for e in state.history if e is not EARLIER]
        assert tuple(added) == row.history
        for exchange in state.history:
            if exchange is not EARLIER:
                assert (exchange.request, exchange.exchange_id) == ("hello", "t1")
                assert exchange.timestamp_us == 7
    if row.history_limit == 1:
        assert EARLIER not in state.history
    # every admission is noted for the log
    admits = sum(1 for line in trace if line.startswith("admit "))
    assert len([n for n in notes if n.event == "router.admission"]) == admits


def test_the_notes_name_what_happened_for_the_log() -> None:
    row = ROWS["rule 2: a focus holder that became ineligible loses focus and is released"]
    _, notes, *_ = drive(row)
    assert notes[0] == Note("router.focus_lost", fields={"route": "a", "reason": "ineligible"})
    row = ROWS["rule 3: a choice that is not a candidate is no choice"]
    _, notes, *_ = drive(row)
    assert (
        Note("router.decision_invalid", "warning", {"choice": "b", "candidates": ["a", "c"]})
        in notes
    )
    assert Note("router.fallback", fields={"route": "c"}) in notes


def test_an_outcome_for_a_question_not_asked_is_refused_naming_both() -> None:
    policy = TurnPolicy(TURN, ParticipantRouting(8), aids("a"))
    assert [show(a) for a in policy.start()] == ["decide a"]
    with pytest.raises(RuntimeError, match="outcome of Answer, but the pending question is Decide"):
        policy.answered(answer())
    policy.decided("a")
    policy.admitted(ACCEPT)
    policy.answered(answer())
    with pytest.raises(RuntimeError, match="the turn ended"):
        policy.decided("a")


# -- rule 1: lanes ------------------------------------------------------------------------

LANE_ROWS = {
    # each step: (op, participant, handle, cancelled, waited for, evicted), op "turn" or
    # "depart" (enter + add), "done" (the handle ended), "forget" (expected: waited for = bool)
    "rule 1: a new turn cancels the participant's previous turn and waits until it drained": (
        8,
        [("turn", "p", "t1", set(), set(), None), ("turn", "p", "t2", {"t1"}, {"t1"}, None)],
        ["p"],
    ),
    "rule 1: a finished turn is neither cancelled nor waited for": (
        8,
        [
            ("turn", "p", "t1", set(), set(), None),
            ("done", "p", "t1", None, None, None),
            ("turn", "p", "t2", set(), set(), None),
        ],
        ["p"],
    ),
    "rule 1: new work waits for a departure in flight and does not cancel it": (
        8,
        [("depart", "p", "d1", set(), set(), None), ("turn", "p", "t2", set(), {"d1"}, None)],
        ["p"],
    ),
    "rule 1: a departure cancels the participant's turns and waits for them": (
        8,
        [
            ("turn", "p", "t1", set(), set(), None),
            ("depart", "p", "d1", {"t1"}, {"t1"}, None),
        ],
        ["p"],
    ),
    "rule 1: other participants are independent": (
        8,
        [("turn", "p", "t1", set(), set(), None), ("turn", "q", "t2", set(), set(), None)],
        ["p", "q"],
    ),
    "rule 1: beyond max_participants the least recently active idle lane is forgotten": (
        2,
        [
            ("turn", "p", "t1", set(), set(), None),
            ("turn", "q", "t2", set(), set(), None),
            ("done", "q", "t2", None, None, None),
            ("turn", "r", "t3", set(), set(), "q"),
        ],
        ["p", "r"],
    ),
    "rule 1: activity makes a lane the most recently active": (
        2,
        [
            ("turn", "p", "t1", set(), set(), None),
            ("turn", "q", "t2", set(), set(), None),
            ("done", "p", "t1", None, None, None),
            ("done", "q", "t2", None, None, None),
            ("turn", "p", "t3", set(), set(), None),
            ("done", "p", "t3", None, None, None),
            ("turn", "r", "t4", set(), set(), "q"),
        ],
        ["p", "r"],
    ),
    "rule 1: with no idle lane the least recently active one is forgotten, its turns cancelled": (
        2,
        [
            ("turn", "p", "t1", set(), set(), None),
            ("turn", "q", "t2", set(), set(), None),
            ("turn", "r", "t3", {"t1"}, set(), "p"),
        ],
        ["q", "r"],
    ),
    "rule 8: a drained departure forgets the lane": (
        8,
        [
            ("depart", "p", "d1", set(), set(), None),
            ("forget", "p", "d1", None, True, None),
        ],
        [],
    ),
    "rule 8: a departure keeps the lane when newer work arrived meanwhile": (
        8,
        [
            ("depart", "p", "d1", set(), set(), None),
            ("turn", "p", "t2", set(), {"d1"}, None),
            ("forget", "p", "d1", None, False, None),
        ],
        ["p"],
    ),
}


@pytest.mark.parametrize("row", list(LANE_ROWS.values()), ids=list(LANE_ROWS))
def test_lanes(row: tuple[int, list[tuple], list[str]]) -> None:
    max_participants, steps, order = row
    lanes: Lanes[str] = Lanes(max_participants, history_limit=8)
    owner: dict[str, Lane[str]] = {}
    unfinished: dict[str, tuple[str, bool]] = {}
    """Work of the lanes kept: handle -> (participant, is a turn)."""
    evictions = 0
    for op, pid, handle, cancelled, waited, evicted in steps:
        if op == "done":
            owner[handle].done(handle)
            del unfinished[handle]
            continue
        if op == "forget":
            assert lanes.forget(pid, owner[handle], handle) is waited
            continue
        entry = lanes.enter(pid)
        assert set(entry.cancel) == cancelled, (op, pid, handle)
        assert entry.after == waited, (op, pid, handle)
        assert entry.evicted == evicted, (op, pid, handle)
        if evicted is not None:
            evictions += 1
            unfinished = {h: work for h, work in unfinished.items() if work[0] != evicted}
        entry.lane.add(handle, turn=op == "turn")
        owner[handle] = entry.lane
        unfinished[handle] = (pid, op == "turn")
    assert list(lanes) == order
    assert len(lanes) == len(order) and all(pid in lanes for pid in order)
    assert lanes.evicted == evictions
    kept = {h: work for h, work in unfinished.items() if work[0] in lanes}
    assert sorted(lanes.pending()) == sorted(kept)
    assert sorted(lanes.turns()) == sorted(h for h, (_, turn) in kept.items() if turn)
    for pid in order:
        mine = [h for h, (owner_pid, turn) in kept.items() if turn and owner_pid == pid]
        assert sorted(lanes.turns(pid)) == sorted(mine)
    assert lanes.turns("nobody") == []


# -- rules 8 and 9: departure and the turn's end ------------------------------------------


@pytest.mark.parametrize(
    ("routes", "cleanup", "steps"),
    [
        pytest.param(
            ["a", "b"],
            True,
            [Forget(), Left("a"), Left("b"), Cleanup()],
            id="rule 8: a departure forgets focus and history, tells every destination, cleans up",
        ),
        pytest.param(
            ["a"],
            False,
            [Forget(), Left("a")],
            id="rule 8: without cleanup_participant the departure ends with the destinations",
        ),
    ],
)
def test_departure(routes: list[str], cleanup: bool, steps: list[object]) -> None:
    assert departure(routes, cleanup=cleanup) == steps


@pytest.mark.parametrize(
    ("result", "ended"),
    [
        pytest.param(
            RouteResult("t1", "answered", "a", "ok"),
            TurnEnded("t1", "answered", "a"),
            id="rule 9: an answered turn ends naming its destination",
        ),
        pytest.param(
            RouteResult("t1", "clarified", "a", "Which?"),
            TurnEnded("t1", "clarified", "a"),
            id="rule 9: a clarified turn ends naming who asked",
        ),
        pytest.param(
            RouteResult("t1", "failed", "a", error="Boom: it broke"),
            TurnEnded("t1", "failed", "a", "Boom: it broke"),
            id="rule 9: a failed turn ends with its cause",
        ),
        pytest.param(
            RouteResult("t1", "unanswered", None, "No.", "NoDestination: a: declined"),
            TurnEnded("t1", "unanswered", None, "NoDestination: a: declined"),
            id="rule 9: an unanswered turn ends with why",
        ),
        pytest.param(
            RouteResult("t1", "canceled"),
            TurnEnded("t1", "canceled"),
            id="rule 9: a cancelled turn ends cancelled",
        ),
    ],
)
def test_turn_ended(result: RouteResult, ended: TurnEnded) -> None:
    assert turn_ended(result) == ended
