"""Actor mailboxes: bounded queues drained by one task, one message at a time."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from xrmq.schemas import MessageMetadata
from xrmq.topics import Topic

from .agent import Agent, RuntimeContext

if TYPE_CHECKING:
    from .runtime import AgentRuntime

Delivery = tuple[Callable[[Any, RuntimeContext], Awaitable[Any]], Any, MessageMetadata, Topic]


class Mailbox:
    """The mailbox of one actor instance.

    ``offer`` never blocks the bus reader: a full mailbox refuses the message and the
    runtime counts and logs the overflow. The worker task awaits each handler before
    taking the next message, so a handler that awaits is never re-entered. A handler's
    exception is logged and counted; the actor goes on with the next message. When the
    message was an ask, the handler's return value (or its failure) is the reply.
    """

    __slots__ = ("agent", "name", "runtime", "capacity", "_items", "_waiter", "_task")

    def __init__(self, runtime: "AgentRuntime", agent: Agent, name: str, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("mailbox_capacity: must be >= 1")
        self.runtime = runtime
        self.agent = agent
        self.name = name
        self.capacity = capacity
        self._items: deque[Delivery] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def depth(self) -> int:
        return len(self._items)

    def offer(self, delivery: Delivery) -> bool:
        """Queue a delivery; False (refused) when the mailbox is full."""
        if len(self._items) >= self.capacity:
            return False
        self._items.append(delivery)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        return True

    def start(self, *, call_on_start: bool) -> None:
        self._task = asyncio.create_task(self._run(call_on_start), name=f"xrmq-actor-{self.name}")

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

    async def _run(self, call_on_start: bool) -> None:
        runtime = self.runtime
        if call_on_start:
            await runtime.guarded_hook(self.agent, "on_start")
        items = self._items
        loop = asyncio.get_running_loop()
        while True:
            if not items:
                self._waiter = loop.create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
                continue
            handler, message, metadata, topic = items.popleft()
            ctx = RuntimeContext(runtime, self.name, metadata, topic)
            try:
                result = await handler(message, ctx)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                runtime.handler_failed(self.name, topic, metadata, "cancelled")
            except Exception as error:  # an actor never dies of its handler
                runtime.handler_failed(self.name, topic, metadata, error)
            else:
                if metadata.reply_to is not None:
                    runtime.reply(metadata, result)
