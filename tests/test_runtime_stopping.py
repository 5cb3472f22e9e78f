"""Stuck actors are reported; stopping keeps the runtime reading until its actors have stopped."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.runtime.progress import ProgressWatch
from xrmq.schemas import ConversationContextUpdate as Update
from xrmq.topics import context_topic

pytestmark = [pytest.mark.timeout(30), pytest.mark.both_loops]

WORK = context_topic("stopping.work")
ECHO = context_topic("stopping.echo")


def test_a_mailbox_is_stuck_when_its_head_has_not_moved_for_the_limit():
    watch = ProgressWatch(stuck_after=5.0)
    first, second = object(), object()
    assert watch.check([("a", first), ("b", None)], 0.0) == ({}, [])
    assert watch.check([("a", first), ("b", None)], 4.9) == ({}, [])
    stuck, newly = watch.check([("a", first), ("b", None)], 5.5)
    assert stuck == {"a": 5.5} and newly == ["a"]
    assert watch.check([("a", first)], 6.0) == ({"a": 6.0}, [])  # reported once per episode
    assert watch.check([("a", second)], 7.0) == ({}, [])  # it moved: the clock restarts
    assert watch.check([("a", None)], 20.0) == ({}, [])  # empty is never stuck
    assert watch.check([("a", second)], 21.0) == ({}, [])
    with pytest.raises(ValueError, match="stuck_after: must be > 0"):
        ProgressWatch(0)


class Blocked(Agent):
    """Its first handler waits until released, so later messages queue behind it."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    @subscribe(WORK)
    async def on_work(self, message: Update, ctx: RuntimeContext) -> None:
        self.entered.set()
        await self.release.wait()


async def test_an_actor_with_queued_messages_that_does_not_move_is_reported_stuck():
    blocked = Blocked()
    runtime = AgentRuntime(stuck_after=1e-6)  # the rule's clock is tested above; here: the wiring
    runtime.register("blocked", blocked)
    async with runtime:
        await runtime.publish(WORK, Update("first"))
        await blocked.entered.wait()
        for text in ("second", "third"):
            runtime.send(WORK, Update(text))
        while runtime.metrics().actors["blocked"] < 2:
            await asyncio.sleep(0)  # the reader delivers on the next loop passes
        runtime.metrics()  # first sight of this head
        report = runtime.metrics()
        assert set(report.stuck) == {"blocked"} and report.stuck["blocked"] > 0
        blocked.release.set()
        while runtime.metrics().actors["blocked"]:
            await asyncio.sleep(0)
        assert runtime.metrics().stuck == {}


class Echo(Agent):
    @subscribe(ECHO)
    async def on_echo(self, message: Update, ctx: RuntimeContext) -> str:
        return message.text


class AsksWhileStopping(Agent):
    """Its ``on_stop`` asks another actor over the bus, as a router draining a remote call does."""

    def __init__(self) -> None:
        self.answer: str | None = None

    async def on_stop(self) -> None:
        self.answer = await self.runtime.ask(
            ECHO, Update("still reading"), reply_type=str, timeout=5
        )


async def test_an_actor_stopping_still_receives_what_it_waits_for():
    stopping = AsksWhileStopping()
    runtime = AgentRuntime()
    runtime.register("echo", Echo())
    runtime.register("stopping", stopping)
    async with runtime:
        pass
    assert stopping.answer == "still reading"
