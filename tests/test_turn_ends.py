"""Every query gets exactly one ``TurnEnded`` (issue 30, item 7).

A participant's new query cancels their earlier turn (router rule 1). A turn cancelled
before its task ever ran (queries sent at once), or while it waited for an earlier turn to
drain, must still end: its client waits on that ``TurnEnded``.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from xrmq.actors.edge.replies import ReplyCollector, ask
from xrmq.actors.routing import AgentRouter, SingleDestination
from xrmq.actors.runtime import Agent, AgentRuntime, Handlers, RuntimeContext
from xrmq.schemas import TurnEnded
from xrmq.topics import QUERY_TOPIC, TURN_ENDED_TOPIC, VOICE_OUTPUT_TOPIC

from router_doubles import Destination, Log


class TurnEnds(Agent):
    """Counts the ``TurnEnded`` of each request id; ``seen(id)`` waits for one."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._arrived: dict[str, asyncio.Event] = {}

    def handlers(self) -> Handlers:
        return {TURN_ENDED_TOPIC: self.on_turn_ended}

    async def on_turn_ended(self, message: TurnEnded, ctx: RuntimeContext) -> None:
        self.counts[message.request_id] += 1
        self._arrived.setdefault(message.request_id, asyncio.Event()).set()

    async def seen(self, request_id: str) -> None:
        await self._arrived.setdefault(request_id, asyncio.Event()).wait()


def register_router(runtime: AgentRuntime, destination: Destination) -> None:
    """A router on ``runtime`` with ``destination`` as its only (local) destination."""
    runtime.register(
        "router",
        AgentRouter(
            {"conversation": destination},
            SingleDestination(),
            query_topic=QUERY_TOPIC,
            output_topic=VOICE_OUTPUT_TOPIC,
        ),
    )


def routed(destination: Destination) -> tuple[AgentRuntime, ReplyCollector, TurnEnds]:
    runtime = AgentRuntime(name="turn-ends")
    collector = runtime.register("replies", ReplyCollector())
    register_router(runtime, destination)
    return runtime, collector, runtime.register("ends", TurnEnds())


class HeldUntil(Destination):
    """Answers no turn before the turn of the query ``last`` was admitted.

    The runtime hands the router queries as they come off its socket: one sent a moment
    before the others can arrive alone, and a destination answering at once would finish
    its turn before the next query cancels it. Held, an earlier turn is still running (or
    never ran) when a later query arrives, however the queries were batched.
    """

    def __init__(self, last: str) -> None:
        super().__init__("conversation", Log())
        self.last = last
        self.last_admitted = asyncio.Event()

    async def admit(self, turn, *, focused):
        if turn.text == self.last:
            self.last_admitted.set()
        return await super().admit(turn, focused=focused)

    async def answer(self, turn, *, started):
        await self.last_admitted.wait()
        return await super().answer(turn, started=started)


async def test_queries_sent_at_once_each_end_the_earlier_ones_canceled():
    runtime, collector, ends = routed(HeldUntil("question 4"))
    async with runtime:
        turns = [ask(runtime, collector, "p1", f"question {i}") for i in range(5)]
        outcomes = [await turn.wait_outcome(10) for turn in turns]
        await asyncio.wait_for(ends.seen(turns[-1].request_id), 10)
    assert [outcome and outcome.status for outcome in outcomes] == ["canceled"] * 4 + ["answered"]
    assert ends.counts == {turn.request_id: 1 for turn in turns}


async def test_a_turn_canceled_while_waiting_for_the_earlier_turn_to_drain_ends():
    destination = Destination("conversation", Log(), answers=["hang"])
    runtime, collector, ends = routed(destination)
    async with runtime:
        first = ask(runtime, collector, "p1", "a long one")
        await destination.answering.wait()
        waiting = ask(runtime, collector, "p1", "second")
        last = ask(runtime, collector, "p1", "third")
        outcomes = [await turn.wait_outcome(10) for turn in (first, waiting, last)]
        await asyncio.wait_for(ends.seen(last.request_id), 10)
    assert [outcome and outcome.status for outcome in outcomes] == [
        "canceled",
        "canceled",
        "answered",
    ]
    assert ends.counts == {turn.request_id: 1 for turn in (first, waiting, last)}


# -- queries the router never took (issue 30, item 8) ---------------------------------------


async def test_a_query_with_no_router_on_the_bus_fails_as_router_unavailable():
    runtime = AgentRuntime(name="front")
    collector = runtime.register("replies", ReplyCollector(router_silence_s=0.3))
    async with runtime:
        turn = ask(runtime, collector, "p1", "anyone there?")
        await turn.wait(10)
    assert turn.outcome is not None and turn.outcome.status == "failed"
    assert (turn.outcome.error or "").startswith("RouterUnavailable: no router heard")


def router_runtime(bus: str, destination: Destination) -> AgentRuntime:
    runtime = AgentRuntime(bus, name="router-process", metrics_interval=0.05)
    register_router(runtime, destination)
    return runtime


async def test_a_query_the_router_answers_is_not_failed_by_the_watch():
    front = AgentRuntime(name="front")
    collector = front.register("replies", ReplyCollector(router_silence_s=0.5))
    async with front, router_runtime(front.address, Destination("conversation", Log())):
        turn = ask(front, collector, "p1", "fine?")
        await turn.wait(10)
        outcome = await turn.wait_outcome(10)
    assert outcome is not None and outcome.status == "answered"
