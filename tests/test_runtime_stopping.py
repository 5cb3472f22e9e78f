"""Stuck actors are reported; stopping keeps the runtime reading until its actors have stopped."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, AskError, RuntimeContext, subscribe
from xrmq.actors.runtime.progress import ProgressWatch
from xrmq.schemas import ConversationContextUpdate as Update
from xrmq.topics import context_topic

pytestmark = [pytest.mark.timeout(30), pytest.mark.both_loops]

WORK = context_topic("stopping.work")
ECHO = context_topic("stopping.echo")
HANG = context_topic("stopping.hang")


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


class Hangs(Agent):
    """Its first handler never returns (unless ``swallow``: it ignores one cancellation and
    waits for ``release``); every later message is recorded."""

    def __init__(self, *, swallow: bool = False) -> None:
        self.entered = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()
        self.swallow = swallow
        self.handled: list[str] = []
        self.all_handled = asyncio.Event()

    @subscribe(HANG)
    async def on_work(self, message: Update, ctx: RuntimeContext) -> str:
        if message.text != "first":
            self.handled.append(message.text)
            if len(self.handled) == 2:
                self.all_handled.set()
            return message.text
        self.entered.set()
        try:
            await asyncio.Event().wait()  # never set: a handler that hangs
        except asyncio.CancelledError:
            self.cancelled.set()
            if not self.swallow:
                raise
        await self.release.wait()
        return "released"


async def test_a_stuck_actor_is_restarted_its_handler_cancelled_and_its_queue_handled():
    hangs = Hangs()
    runtime = AgentRuntime(stuck_after=0.2, metrics_interval=0.05)
    runtime.register("hangs", hangs)
    async with runtime:
        ask = asyncio.create_task(runtime.ask(HANG, Update("first"), reply_type=str, timeout=20))
        await hangs.entered.wait()
        for text in ("second", "third"):
            runtime.send(HANG, Update(text))
        with pytest.raises(AskError, match="stuck"):
            await ask  # the asker learns at once, instead of waiting out its timeout
        await asyncio.wait_for(hangs.all_handled.wait(), 20)
        assert hangs.cancelled.is_set() and hangs.handled == ["second", "third"]
        metrics = runtime.metrics()
        assert metrics.stuck_restarts == 1 and metrics.actor_faults == {"hangs": 1}
        assert metrics.actor_restarts == 0  # the same mailbox and task went on
        assert await runtime.ask(HANG, Update("fourth"), reply_type=str, timeout=5) == "fourth"


async def test_a_handler_that_swallows_the_cancellation_stays_stuck_then_goes_on():
    hangs = Hangs(swallow=True)
    runtime = AgentRuntime(stuck_after=0.2, metrics_interval=0.05)
    runtime.register("hangs", hangs)
    async with runtime:
        runtime.send(HANG, Update("first"))
        await hangs.entered.wait()
        for text in ("second", "third"):
            runtime.send(HANG, Update(text))
        await asyncio.wait_for(hangs.cancelled.wait(), 20)
        report = runtime.metrics()  # the same head as when it was restarted: still stuck
        assert "hangs" in report.stuck and report.stuck_restarts == 1 and not hangs.handled
        hangs.release.set()
        await asyncio.wait_for(hangs.all_handled.wait(), 20)
        assert hangs.handled == ["second", "third"]
        # The swallowed cancellation left nothing behind: the task is not "being cancelled".
        assert await runtime.ask(HANG, Update("fourth"), reply_type=str, timeout=5) == "fourth"
        assert runtime.metrics().actor_restarts == 0


async def test_restart_stuck_off_only_reports_the_stuck_actor():
    blocked = Blocked()
    runtime = AgentRuntime(stuck_after=1e-6, restart_stuck=False)
    runtime.register("blocked", blocked)
    async with runtime:
        await runtime.publish(WORK, Update("first"))
        await blocked.entered.wait()
        runtime.send(WORK, Update("second"))
        while runtime.metrics().actors["blocked"] < 1:
            await asyncio.sleep(0)
        runtime.metrics()
        assert set(runtime.metrics().stuck) == {"blocked"}
        assert runtime.metrics().stuck_restarts == 0
        blocked.release.set()


class Echo(Agent):
    @subscribe(ECHO)
    async def on_echo(self, message: Update, ctx: RuntimeContext) -> str:
        return message.text


class AsksWhileStopping(Agent):
    """Its ``on_stop`` asks another actor over the bus, as a router draining a remote call does."""

    def __init__(self) -> None:
        self.answer: str | None = None

    async def on_stop(self) -> None:
        assert self.runtime is not None  # registered
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
