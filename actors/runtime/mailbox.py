"""Actor mailboxes: bounded queues drained by one task, one message at a time.

Hot path: benchmark before and after a change here (``python -m bench bus turn storm``,
see ``bench/README.md``).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

from xrmq.schemas import MessageMetadata
from xrmq.schemas._validation import check_positive
from xrmq.topics import Topic

from ._compat import enter_task, leave_task
from .agent import Agent, RuntimeContext

if TYPE_CHECKING:
    from .runtime import AgentRuntime

Delivery = tuple[
    Callable[[Any, RuntimeContext], Coroutine[Any, Any, Any]], Any, MessageMetadata, Topic
]


class Mailbox:
    """The mailbox of one actor instance.

    ``offer`` never blocks the bus reader: a full mailbox refuses the message and the
    runtime counts and logs the overflow. The worker task awaits each handler before
    taking the next message, so a handler that awaits is never re-entered. A handler's
    exception is logged and counted; the actor goes on with the next message. When the
    message was an ask, the handler's return value (or its failure) is the reply.

    A request offered to an idle actor (its task parked, nothing queued) can start its
    handler at once, in the reader's callback, as the actor's task: the handler runs
    in the task's context and sees it as ``asyncio.current_task()``, the way CPython
    3.12's eager tasks start a coroutine. A handler that finishes without suspending
    (most do, and so does the reply to an ask) costs no event-loop pass; one that
    suspends is handed to the task, which resumes it where it stopped. One message at
    a time still holds: a handler only starts inline when no other is running or queued.
    Starting inline takes a private asyncio API (``_compat.INLINE_START``); without it
    the request is queued for the task like any other message.
    """

    __slots__ = (
        "_context",
        "_handoff",
        "_items",
        "_loop",
        "_task",
        "_waiter",
        "agent",
        "capacity",
        "name",
        "runtime",
    )

    def __init__(self, runtime: AgentRuntime, agent: Agent, name: str, capacity: int) -> None:
        check_positive(capacity, "mailbox_capacity")
        self.runtime = runtime
        self.agent = agent
        self.name = name
        self.capacity = capacity
        self._items: deque[Delivery] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._context: contextvars.Context | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handoff: _Suspended | None = None

    @property
    def depth(self) -> int:
        return len(self._items)

    @property
    def head(self) -> Delivery | None:
        """The delivery the actor takes next (None when empty); the same one for long: stuck."""
        return self._items[0] if self._items else None

    def offer(self, delivery: Delivery, start: bool = False) -> bool:
        """Take a delivery; False (refused) when full.

        With ``start``, an idle actor starts its handler now; otherwise (or when a
        handler is running, or the task is about to take the queue) it is queued.
        """
        items = self._items
        if len(items) >= self.capacity:
            return False
        waiter = self._waiter
        if not start or waiter is None or waiter.done():
            items.append(delivery)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        else:
            self._start_inline(delivery, waiter)
        return True

    def start(self, *, call_on_start: bool) -> None:
        self._loop = asyncio.get_running_loop()
        self._context = contextvars.copy_context()
        self._task = self._loop.create_task(
            self._run(call_on_start), name=f"xrmq-actor-{self.name}", context=self._context
        )

    async def stop(self) -> None:
        """Cancel the worker (an in-flight handler is cancelled) and wait for it."""
        if self._task is None:
            return
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self._task = None

    def _start_inline(self, delivery: Delivery, waiter: asyncio.Future[None]) -> None:
        """Run a handler's first step now, as the actor's (parked) task; hand it over if it
        suspends."""
        loop, task, context = self._loop, self._task, self._context
        if TYPE_CHECKING:  # started: the offer found the task's waiter (no cost at run time)
            assert loop is not None and task is not None and context is not None
        try:
            enter_task(loop, task)
        except RuntimeError:  # offered from inside another task (or no inline start): queue it
            self._items.append(delivery)
            waiter.set_result(None)
            return
        handler, message, metadata, topic = delivery
        try:
            coro = handler(message, RuntimeContext(self.runtime, self.name, metadata, topic))
            yielded = context.run(coro.send, None)
        except StopIteration as done:
            if metadata.reply_to is not None:
                self.runtime.reply(metadata, done.value)
        except asyncio.CancelledError:
            self.runtime.handler_failed(self.name, topic, metadata, "cancelled")
        except Exception as error:  # an actor never dies of its handler
            self.runtime.handler_failed(self.name, topic, metadata, error)
        else:
            self._handoff = _Suspended(coro, yielded, metadata, topic)
            if (
                not waiter.done()
            ):  # done: the handler cancelled the task; the task wakes to that anyway
                waiter.set_result(None)
        finally:
            leave_task(loop, task)

    async def _run(self, call_on_start: bool) -> None:
        runtime = self.runtime
        if call_on_start:
            await runtime.guarded_hook(self.agent, "on_start")
        items = self._items
        loop = self._loop
        if TYPE_CHECKING:  # start() set it before creating this task
            assert loop is not None
        handling: Awaitable[Any]
        while True:
            if items:
                handler, message, metadata, topic = items.popleft()
                handling = handler(message, RuntimeContext(runtime, self.name, metadata, topic))
            else:
                self._waiter = loop.create_future()
                try:
                    await self._waiter
                except asyncio.CancelledError as cancel:
                    if self._handoff is None:
                        raise
                    self._handoff.pending_error = cancel  # meant for the handler started inline
                finally:
                    self._waiter = None
                suspended, self._handoff = self._handoff, None
                if suspended is None:
                    continue
                handling, metadata, topic = suspended, suspended.metadata, suspended.topic
            try:
                result = await handling
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if (
                    current is not None and current.cancelling()
                ):  # this task is being cancelled: stop
                    raise
                runtime.handler_failed(self.name, topic, metadata, "cancelled")
            except Exception as error:  # an actor never dies of its handler
                runtime.handler_failed(self.name, topic, metadata, error)
            else:
                if metadata.reply_to is not None:
                    runtime.reply(metadata, result)


class _Suspended:
    """A handler coroutine that suspended in its inline first step, resumed by the actor's task.

    Awaiting it is ``yield from`` the coroutine, past the step already taken: what it
    yielded (the future it waits on) goes to the task, and what the task sends or
    throws back goes to the coroutine. ``pending_error`` is a cancellation that reached
    the task before it took the handler over; it is thrown in first.
    """

    __slots__ = ("coro", "metadata", "pending_error", "topic", "yielded")

    def __init__(
        self, coro: Coroutine[Any, Any, Any], yielded: Any, metadata: MessageMetadata, topic: Topic
    ) -> None:
        self.coro = coro
        self.yielded = yielded
        self.metadata = metadata
        self.topic = topic
        self.pending_error: BaseException | None = None

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, yielded = self.coro, self.yielded
        error, self.pending_error = self.pending_error, None
        while True:
            if error is not None:
                try:
                    yielded = coro.throw(error)
                except StopIteration as done:
                    return done.value
                error = None
            try:
                sent = yield yielded
            except (
                BaseException
            ) as thrown:  # the task's cancellation, or the awaited future's failure
                error = thrown
                continue
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value
