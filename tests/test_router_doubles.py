"""Test doubles for the routing tests (no tests here): a scriptable destination, a scripted
decision service and a recording router output, sharing one event log so tests can assert order."""

from __future__ import annotations

import asyncio
from collections import deque

from xrmq.actors.routing import current_turn_context
from xrmq.schemas import Admission, AgentTurn, DestinationResult, RoutingAid


class Log(list):
    def of(self, kind: str) -> list[tuple]:
        return [entry for entry in self if entry[0] == kind]


class Destination:
    """A RoutableAgent whose admissions and answers are scripted.

    ``admissions`` are used in order (then ``Admission("accept")``); ``answers`` too
    (then a plain text answer). An answer is a ``DestinationResult`` to return, an
    exception to raise before ``started()``, ``("after", exc)`` to raise after it, or
    ``"hang"`` to wait after ``started()`` until cancelled (draining takes one more
    event-loop turn, logged as ``drained``).
    """

    def __init__(self, name: str, log: Log, *, aid: RoutingAid | None = None, admissions=(), answers=()) -> None:
        self.name = name
        self.log = log
        self.aid = aid or RoutingAid(f"{name} destination")
        self.admissions = deque(admissions)
        self.answers = deque(answers)
        self.answering = asyncio.Event()

    def routing_aid(self, participant_id: str) -> RoutingAid:
        return self.aid

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission:
        self.log.append(("admit", self.name, turn.turn_id, focused))
        return self.admissions.popleft() if self.admissions else Admission("accept")

    async def answer(self, turn: AgentTurn, *, started) -> DestinationResult:
        context = current_turn_context()
        self.log.append(("answer", self.name, turn.turn_id, tuple(e.exchange_id for e in turn.history), context.route))
        script = self.answers.popleft() if self.answers else DestinationResult(response=f"{self.name} answers {turn.turn_id}")
        if isinstance(script, Exception):
            raise script
        await started()
        self.log.append(("started", self.name, turn.turn_id))
        if isinstance(script, tuple):
            raise script[1]
        if script == "hang":
            self.answering.set()
            try:
                await asyncio.Event().wait()
            finally:
                await asyncio.sleep(0)
                self.log.append(("drained", self.name, turn.turn_id))
        return script

    async def release(self, participant_id: str) -> None:
        self.log.append(("release", self.name, participant_id))

    async def participant_left(self, participant_id: str) -> None:
        self.log.append(("left", self.name, participant_id))


class Decisions:
    """Returns scripted choices in order (then None) and logs each call's candidates."""

    def __init__(self, log: Log, *choices: str | None) -> None:
        self.log = log
        self.choices = deque(choices)

    async def decide(self, turn: AgentTurn, candidates) -> str | None:
        self.log.append(("decide", turn.turn_id, tuple(candidates)))
        return self.choices.popleft() if self.choices else None


def router_output(log: Log):
    async def output(turn: AgentTurn, route: str | None, text: str) -> None:
        log.append(("say", route, turn.turn_id, text))

    return output
