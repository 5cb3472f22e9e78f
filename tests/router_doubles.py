"""Test doubles for the routing tests (no tests here): a scriptable destination, a scripted
decision service and a recording router output, sharing one event log so tests can assert order,
a context-manager double and an output recorder actor."""

from __future__ import annotations

import asyncio
from collections import deque

from xrmq.actors.routing import current_turn_context
from xrmq.actors.runtime import Agent, RuntimeContext, subscribe
from xrmq.schemas import Admission, AgentTurn, DestinationResult, ResponseOutput, RoutingAid
from xrmq.topics import VOICE_OUTPUT_TOPIC


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

    def __init__(
        self, name: str, log: Log, *, aid: RoutingAid | None = None, admissions=(), answers=()
    ) -> None:
        self.name = name
        self.log = log
        self.aid = aid or RoutingAid(f"{name} destination")
        self.admissions = deque(admissions)
        self.answers = deque(answers)
        self.answering = asyncio.Event()
        self.answered = asyncio.Event()

    def routing_aid(self, participant_id: str) -> RoutingAid:
        return self.aid

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission:
        self.log.append(("admit", self.name, turn.turn_id, focused))
        return self.admissions.popleft() if self.admissions else Admission("accept")

    async def answer(self, turn: AgentTurn, *, started) -> DestinationResult:
        context = current_turn_context()
        assert context is not None  # routed by a router
        self.log.append(
            (
                "answer",
                self.name,
                turn.turn_id,
                tuple(e.exchange_id for e in turn.history),
                context.route,
            )
        )
        script = (
            self.answers.popleft()
            if self.answers
            else DestinationResult(response=f"{self.name} answers {turn.turn_id}")
        )
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
        self.answered.set()
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


class OutputRecorder(Agent):
    """Records every ResponseOutput frame on the voice output topic, in arrival order."""

    def __init__(self) -> None:
        self.frames: list[tuple[str | None, str, ResponseOutput]] = []
        self._changed = asyncio.Event()

    @subscribe(VOICE_OUTPUT_TOPIC)
    async def on_output(self, message: ResponseOutput, ctx: RuntimeContext) -> None:
        self.frames.append((ctx.participant_id, ctx.metadata.source, message))
        self._changed.set()

    async def wait_for(self, predicate, timeout: float = 10.0) -> None:
        """Wait until ``predicate(frames)`` holds (bounded, so a failure cannot hang the suite)."""
        async with asyncio.timeout(timeout):
            while not predicate(self.frames):
                self._changed.clear()
                await self._changed.wait()

    def finals(self, participant_id: str | None = None) -> int:
        return sum(
            1 for pid, _, frame in self.frames if frame.final and participant_id in (None, pid)
        )

    def texts(self, participant_id: str, source: str | None = None) -> str:
        return "".join(
            frame.text
            for pid, src, frame in self.frames
            if pid == participant_id and source in (None, src)
        )


class FakeContext:
    """The ContextManager surface the conversation uses: exchanges by id, no replay, in a log."""

    def __init__(self, log: Log | None = None) -> None:
        self.log = log if log is not None else Log()
        self.exchanges: dict[str, list[tuple[str, str, object]]] = {}

    def blocks(self, participant_id: str):
        from xrmq.schemas import ContextBlock

        return tuple(
            ContextBlock(None, f"User: {request}\nAssistant: {answer}")
            for request, answer, _ in self.exchanges.get(participant_id, [])
        )

    def record_exchange(self, participant_id, request, answer, *, timestamp_us, exchange_id):
        self.log.append(("record", participant_id, exchange_id))
        self.exchanges.setdefault(participant_id, []).append((request, answer, exchange_id))

    def reconcile_history(self, participant_id, exchanges, *, exchange_ids):
        known = {exchange_id for _, _, exchange_id in self.exchanges.get(participant_id, [])}
        for (request, answer, _), exchange_id in zip(exchanges, exchange_ids):
            if exchange_id not in known:
                self.log.append(("reconciled", participant_id, exchange_id))
                self.exchanges.setdefault(participant_id, []).append((request, answer, exchange_id))

    async def retract_exchange(self, participant_id, exchange_id) -> None:
        self.log.append(("retract", participant_id, exchange_id))
        held = self.exchanges.get(participant_id, [])
        held[:] = [exchange for exchange in held if exchange[2] != exchange_id]

    async def clear(self, participant_id: str) -> None:
        self.log.append(("clear", participant_id))
        self.exchanges.pop(participant_id, None)


class Finishing:
    """A destination whose answer ends when ``finish`` is set (a long answer in flight)."""

    def __init__(self) -> None:
        self.answering = asyncio.Event()
        self.finish = asyncio.Event()

    def routing_aid(self, participant_id: str) -> RoutingAid:
        return RoutingAid("finishing")

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission:
        return Admission("accept")

    async def answer(self, turn: AgentTurn, *, started) -> DestinationResult:
        await started()
        self.answering.set()
        await self.finish.wait()
        return DestinationResult(response="all of it")

    async def release(self, participant_id: str) -> None: ...

    async def participant_left(self, participant_id: str) -> None: ...
