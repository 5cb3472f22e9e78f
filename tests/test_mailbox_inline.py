"""A request to an idle actor starts its handler in the reader's callback.

The handler must not be able to tell: it runs as the actor's task, in the actor's
context, can time itself out and is cancelled like any handler the task started.
Without the private asyncio API this needs (``_compat.INLINE_START`` False, forced by
``XRMQ_COMPAT_FALLBACK=1`` in ``test_runtime_compat.py``) the request is queued for the
task instead, and everything else here holds the same.
"""

from __future__ import annotations

import asyncio
import contextvars

import msgspec
import pytest
import zmq

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeClosedError, subscribe
from xrmq.actors.runtime._compat import INLINE_START
from xrmq.schemas import ConversationContextUpdate as Update
from xrmq.schemas import MessageMetadata
from xrmq.topics import context_topic

pytestmark = [pytest.mark.timeout(30), pytest.mark.both_loops]

NOTES = context_topic("notes")
HANDLED = contextvars.ContextVar("handled", default=0)
BY_TASK_WHEN_STARTED_AT_ONCE = not INLINE_START
"""``from_task`` of a request started at once: False inline, True on the fallback path."""


class Observer(Agent):
    """Records, per message, the task it ran in, what the actor's context held, and whether
    the actor's own loop was running it (False: the reader started it inline)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, asyncio.Task | None, int]] = []
        self.from_task: list[bool] = []
        self.hold = asyncio.Event()
        self.holding = asyncio.Event()

    @subscribe(NOTES)
    async def on_notes(self, message, ctx) -> str:
        self.seen.append((message.text, asyncio.current_task(), HANDLED.get()))
        task = asyncio.current_task()
        assert task is not None  # a handler runs in a task
        self.from_task.append(task.get_coro().cr_running)  # type: ignore[union-attr]  # a coroutine
        HANDLED.set(HANDLED.get() + 1)
        if message.text == "hold":
            self.holding.set()
            await self.hold.wait()
        return message.text


class Witness(Agent):
    """Answers like Observer; its handler for ``text`` runs after the reader has handed
    that message to every actor of the topic."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.seen = asyncio.Event()

    @subscribe(NOTES)
    async def on_notes(self, message, ctx) -> str:
        if message.text == self.text:
            self.seen.set()
        return message.text


async def test_a_handler_started_by_the_reader_runs_as_the_actors_task_in_its_context():
    observer, witness = Observer(), Witness("queued")
    runtime = AgentRuntime()
    runtime.register("observer", observer)
    runtime.register("witness", witness)
    async with runtime:
        assert await runtime.ask(NOTES, Update("idle"), reply_type=str) == "idle"
        held = asyncio.create_task(runtime.ask(NOTES, Update("hold"), reply_type=str))
        await observer.holding.wait()
        queued = asyncio.create_task(runtime.ask(NOTES, Update("queued"), reply_type=str))
        await witness.seen.wait()  # the reader queued it for the observer, behind "hold"
        observer.hold.set()
        assert (await held, await queued) == ("hold", "queued")
    assert [text for text, _, _ in observer.seen] == ["idle", "hold", "queued"]
    # "idle" may arrive before the actor's task first parks; once it is answered the task
    # is parked (it parks in the step that replied, or never left), so "hold" starts
    # inline, and "queued", queued behind it, is started by the task.
    assert observer.from_task[1:] == [BY_TASK_WHEN_STARTED_AT_ONCE, True]
    tasks = {task for _, task, _ in observer.seen}  # one task, the actor's own
    assert len(tasks) == 1 and tasks.pop().get_name() == "xrmq-actor-observer"
    assert [count for _, _, count in observer.seen] == [0, 1, 2]
    assert HANDLED.get() == 0  # the actor's context is its own


async def test_a_one_way_message_to_an_idle_actor_is_taken_by_its_task():
    observer = Observer()
    runtime = AgentRuntime()
    runtime.register("observer", observer)
    async with runtime:
        # answered: the actor's task is parked
        await runtime.ask(NOTES, Update("idle"), reply_type=str)
        await runtime.publish(NOTES, Update("one-way"))
        await runtime.ask(NOTES, Update("after"), reply_type=str)
    assert [text for text, _, _ in observer.seen] == ["idle", "one-way", "after"]
    assert observer.from_task[1] is True


class Patient(Agent):
    """Times out its own wait, or is cancelled in it; reports which."""

    def __init__(self) -> None:
        self.never = asyncio.Event()
        self.waiting = asyncio.Event()
        self.outcomes: list[str] = []

    @subscribe(NOTES)
    async def on_notes(self, message, ctx) -> str:
        if message.text == "ping":
            return "pong"
        if message.text == "timeout":
            try:
                async with asyncio.timeout(0.01):
                    await self.never.wait()
            except TimeoutError:
                return "timed out"
        if message.text == "cancel-self":
            # lands before the actor's task has taken the handler over
            task = asyncio.current_task()
            assert task is not None  # a handler runs in a task
            task.cancel()
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                task.uncancel()
                return "cancellation caught"
        self.waiting.set()
        try:
            await self.never.wait()
        except asyncio.CancelledError:
            self.outcomes.append("cancelled")
            raise
        return "unreachable"


async def test_a_handler_started_by_the_reader_can_time_itself_out():
    runtime = AgentRuntime()
    runtime.register("patient", Patient())
    async with runtime:
        assert await runtime.ask(NOTES, Update("timeout"), reply_type=str) == "timed out"
        assert await runtime.ask(NOTES, Update("timeout"), reply_type=str) == "timed out"


async def test_a_cancellation_before_the_actor_takes_over_reaches_the_handler():
    runtime = AgentRuntime()
    runtime.register("patient", Patient())
    async with runtime:
        # answered: the next request starts inline
        await runtime.ask(NOTES, Update("ping"), reply_type=str)
        assert (
            await runtime.ask(NOTES, Update("cancel-self"), reply_type=str) == "cancellation caught"
        )
        # the actor goes on
        assert await runtime.ask(NOTES, Update("timeout"), reply_type=str) == "timed out"
        assert runtime.metrics().rejected == 0 and runtime.metrics().handler_errors == 0


async def test_stopping_cancels_a_suspended_handler_started_by_the_reader():
    patient = Patient()
    runtime = AgentRuntime()
    runtime.register("patient", patient)
    await runtime.start()
    # answered: the next request starts inline
    await runtime.ask(NOTES, Update("ping"), reply_type=str)
    waiting = asyncio.create_task(runtime.ask(NOTES, Update("wait"), timeout=30))
    await patient.waiting.wait()
    await runtime.stop()
    assert patient.outcomes == ["cancelled"]
    assert isinstance(
        (await asyncio.gather(waiting, return_exceptions=True))[0], RuntimeClosedError
    )


async def test_an_offer_from_inside_a_task_is_queued_for_the_actor_not_started_inline():
    observer = Observer()
    runtime = AgentRuntime()
    runtime.register("observer", observer)
    async with runtime:
        await runtime.ask(NOTES, Update("idle"), reply_type=str)  # the actor's task is parked, idle
        mailbox = runtime._agents["observer"]
        done = asyncio.Event()

        async def handler(message, ctx):
            done.set()

        assert mailbox.offer(
            (handler, Update("from a task"), MessageMetadata("m", "s", "t", 1, 1, 0), NOTES), True
        )
        assert not done.is_set()  # not run here, in this task
        await done.wait()  # the actor's task ran it


async def test_the_reader_yields_after_a_request_that_could_not_start_at_once():
    """White-box, the reader's per-message decision (``_dispatch``'s answer is what
    ``_on_readable`` breaks on): a request queued behind other messages of a drain ends
    the drain early, so its actor runs before the rest of a burst is read; a request that
    started its handler, and a one-way message, do not."""
    observer = Observer()
    runtime = AgentRuntime()
    runtime.register("observer", observer)
    async with runtime:
        # answered: the actor's task is parked
        await runtime.ask(NOTES, Update("warm"), reply_type=str)
        loop = asyncio.get_running_loop()
        decided = loop.create_future()
        seqs = iter(range(1, 10))

        def dispatch(text: str, *, request: bool, first: bool):
            seq = next(seqs)
            metadata = MessageMetadata(
                f"m{seq}",
                "test",
                "test-sender",
                1,
                seq,
                0,
                None,
                None,
                "p1",
                "_inbox.nobody" if request else None,
            )
            return runtime._dispatch(
                NOTES.key("p1"),
                zmq.Frame(msgspec.msgpack.encode(metadata)),
                zmq.Frame(NOTES.encode(Update(text))),
                first,
            )

        def decide():  # as the reader does: in a loop callback, outside any task
            decided.set_result(
                [
                    bool(dispatch("one-way, first", request=False, first=True)),
                    bool(dispatch("request behind it", request=True, first=False)),
                ]
            )

        loop.call_soon(decide)
        assert await decided == [False, True]
        await runtime.ask(NOTES, Update("sync"), reply_type=str)  # answered after both queued ones
        started = loop.create_future()
        loop.call_soon(
            lambda: started.set_result(bool(dispatch("request, first", request=True, first=True)))
        )
        assert await started is BY_TASK_WHEN_STARTED_AT_ONCE  # queued on the fallback path
    assert [text for text, _, _ in observer.seen] == [
        "warm",
        "one-way, first",
        "request behind it",
        "sync",
        "request, first",
    ]
    assert observer.from_task[1:3] == [True, True]
    assert observer.from_task[4] is BY_TASK_WHEN_STARTED_AT_ONCE
