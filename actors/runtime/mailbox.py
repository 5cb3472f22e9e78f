"""Actor mailboxes: bounded queues drained by one task, one message at a time.

A mailbox knows the runtime hosting it only as a ``MailboxHost``: whether it runs, how a
handler's result is replied, and where the faults of its actor's path are counted.

Hot path: benchmark before and after a change here (``python -m bench bus turn storm``,
see ``bench/README.md``).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Protocol

from xrmq.schemas import MessageMetadata
from xrmq.schemas._validation import check_positive
from xrmq.topics import Topic

from ._compat import enter_task, leave_task
from .agent import Agent, AgentHost, RuntimeContext
from .superseding import Latest, RequestLane, request_lane, superseding_keys

Delivery = tuple[
    Callable[[Any, RuntimeContext], Coroutine[Any, Any, Any]], Any, MessageMetadata, Topic
]


class MailboxHost(Protocol):
    """What a mailbox needs of the runtime hosting it (``AgentRuntime``), which its handlers
    see as an ``AgentHost``."""

    @property
    def running(self) -> bool: ...

    def reply(self, request: MessageMetadata, result: Any, *, error: str | None = None) -> None:
        """Send a handler's result (or failure) to the asker."""

    async def guarded_hook(self, agent: Agent, hook: str, mailbox: Mailbox | None = None) -> None:
        """Run ``on_start``/``on_stop``; a failure is a counted fault, never raised."""

    def handler_failed(
        self, actor: str, topic: Topic, metadata: MessageMetadata, error: BaseException | str
    ) -> None:
        """Count and log a handler's failure; answer an ask with the error."""

    def actor_fault(
        self,
        actor: str,
        step: str,
        topic: Topic,
        metadata: MessageMetadata,
        error: BaseException | str,
    ) -> None:
        """Count and log a fault in the actor's path (``step``: reply, report...)."""

    def mailbox_restarted(self, actor: str, error: BaseException | None) -> None:
        """The worker task ended although nobody stopped it; it was started again."""

    def coalesced(self) -> None:
        """Count a superseding update replaced while queued (``RuntimeMetrics.coalesced``)."""


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

    No message ends the worker: an exception anywhere in its path (starting the handler,
    the handler, encoding and sending the reply) is a fault, counted in ``faults`` and
    logged by the runtime, and the worker takes the next message. If the worker task ends
    anyway, it is started again at once (one-for-one supervision inside the process; the
    queue is kept) and the runtime counts the restart.

    A stuck actor (a handler that does not return while messages wait behind it) is
    restarted by ``cancel_stuck``: the handler in flight is cancelled (its message is a
    fault; an ask gets the error), the queue is kept, and the worker takes the next
    message. A handler that swallows the cancellation, or blocks the event loop itself,
    cannot be restarted here (see ``AgentRuntime``).

    Superseding updates (handlers marked ``@superseding``, see ``superseding``): a newer
    one of the same key replaces an older one still queued (counted in ``coalesced``),
    and the next one waits while a request queued for another, idle actor on this event
    loop has not been taken yet (``RequestLane``); a request queued here for this idle
    actor holds the lane until the worker takes it.
    """

    __slots__ = (
        "_context",
        "_handoff",
        "_held_for",
        "_holding",
        "_items",
        "_lane",
        "_latest",
        "_loop",
        "_stopping",
        "_superseding",
        "_task",
        "_unstick",
        "_waiter",
        "agent",
        "capacity",
        "coalesced",
        "faults",
        "host",
        "name",
        "runtime",
    )

    def __init__(
        self, host: MailboxHost, runtime: AgentHost, agent: Agent, name: str, capacity: int
    ) -> None:
        check_positive(capacity, "mailbox_capacity")
        self.host = host
        self.runtime = runtime
        """The runtime as handlers see it (``RuntimeContext.runtime``; the host itself)."""
        self.agent = agent
        self.name = name
        self.capacity = capacity
        self.faults = 0
        """Exceptions in this actor's path (handler, reply, hooks), each survived."""
        self._stopping = False
        self._unstick = False
        """A ``cancel_stuck`` is on its way to the handler in flight."""
        self.coalesced = 0
        """Superseding updates replaced, while queued, by a newer one of the same key."""
        self._items: deque[Delivery | Latest] = deque()
        self._superseding = superseding_keys(type(agent))
        self._latest: dict[Any, Latest] = {}
        """The queued slot of each superseding key (one per slot: bounded by the queue)."""
        self._lane: RequestLane | None = None
        self._holding = False
        self._held_for: str | None = None
        """A request queued here while the actor was idle holds the lane (``RequestLane``)."""
        self._waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._context: contextvars.Context | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handoff: _Suspended | None = None

    @property
    def depth(self) -> int:
        return len(self._items)

    @property
    def idle(self) -> bool:
        """Nothing queued and the worker parked (no handler running)."""
        waiter = self._waiter
        return not self._items and waiter is not None and not waiter.done()

    @property
    def head(self) -> object | None:
        """What the actor takes next (a delivery, or a superseding update's slot; None when
        empty); the same one for long: stuck."""
        return self._items[0] if self._items else None

    def offer(self, delivery: Delivery, start: bool = False) -> bool:
        """Take a delivery; False (refused) when full.

        With ``start``, an idle actor starts its handler now; otherwise (or when a
        handler is running, or the task is about to take the queue) it is queued. A
        superseding update replaces a queued one of its key (True, counted).
        """
        items = self._items
        if self._superseding and delivery[2].reply_to is None:
            key_of = self._superseding.get(getattr(delivery[0], "__func__", None))
            if key_of is not None:
                return self._offer_update(delivery, key_of)
        if len(items) >= self.capacity:
            return False
        waiter = self._waiter
        if not start or waiter is None or waiter.done():
            items.append(delivery)
            if waiter is not None and not waiter.done():
                if delivery[2].reply_to is not None:
                    self._hold(delivery[2].participant_id)
                waiter.set_result(None)
        else:
            self._start_inline(delivery, waiter)
        return True

    def _offer_update(self, delivery: Delivery, key_of: Callable[[Any], Any]) -> bool:
        """Queue a superseding update, or put it in the place of the queued one it supersedes."""
        handler, message, metadata, topic = delivery
        key: Any = None
        slot: Latest | None = None
        try:
            key = (handler.__func__, metadata.participant_id, key_of(message))  # type: ignore[attr-defined]  # a bound method
            slot = self._latest.get(key)
        except Exception as error:  # a bad (or unhashable) key: an ordinary delivery, a fault
            self.faults += 1
            self.host.actor_fault(self.name, "superseding key", topic, metadata, error)
            key = None
        if slot is not None:
            slot.delivery = delivery
            self.coalesced += 1
            self.host.coalesced()
            return True
        items = self._items
        if len(items) >= self.capacity:
            return False
        if key is None:
            items.append(delivery)
        else:
            slot = self._latest[key] = Latest(key, delivery)
            items.append(slot)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        return True

    def _hold(self, participant_id: str | None) -> None:
        """A request queued for this idle actor: superseding updates elsewhere wait for it,
        except the participant's own (``RequestLane``)."""
        if not self._holding and self._lane is not None:
            self._holding = True
            self._held_for = participant_id
            self._lane.hold(participant_id)

    def _unhold(self, at_once: bool) -> None:
        """The request was taken (``at_once`` False: release after its handler's first step
        and what it scheduled), or can no longer be (the worker ended or stops)."""
        if self._holding and self._lane is not None:
            self._holding = False
            if at_once or self._loop is None or self._loop.is_closed():
                self._lane.release(self._held_for)
            else:
                self._loop.call_soon(self._lane.release, self._held_for)

    def start(self, *, call_on_start: bool) -> None:
        self._loop = asyncio.get_running_loop()
        self._lane = request_lane(self._loop)
        self._context = contextvars.copy_context()
        self._spawn(call_on_start)

    def _spawn(self, call_on_start: bool) -> None:
        self._unstick = False
        if TYPE_CHECKING:  # start() set it (no cost at run time)
            assert self._loop is not None
        self._task = self._loop.create_task(
            self._run(call_on_start), name=f"xrmq-actor-{self.name}", context=self._context
        )
        self._task.add_done_callback(self._worker_ended)

    def _worker_ended(self, task: asyncio.Task[None]) -> None:
        """Start the worker again if it ended while nobody stopped it."""
        if TYPE_CHECKING:  # start() set it
            assert self._loop is not None
        if self._stopping or task is not self._task or self._loop.is_closed():
            self._unhold(at_once=True)
            return
        self._unhold(at_once=True)
        if not self.host.running:
            return
        error = None if task.cancelled() else task.exception()
        self._waiter = None
        self._handoff = None
        self.host.mailbox_restarted(self.name, error)
        self._spawn(False)

    def cancel_stuck(self) -> bool:
        """Cancel the handler in flight so the worker goes on with the queue; False when
        there is none to cancel (the worker is parked, stopping, or a cancel is pending)."""
        task, waiter = self._task, self._waiter
        if task is None or task.done() or self._stopping or self._unstick:
            return False
        if waiter is not None and not waiter.done():
            return False  # parked: no handler is running
        self._unstick = True
        task.cancel()
        return True

    async def stop(self) -> None:
        """Cancel the worker (an in-flight handler is cancelled) and wait for it."""
        self._stopping = True
        self._unhold(at_once=True)
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
        suspends. A request holds the lane for that step and what it scheduled, as a queued
        one does until its actor takes it: its participant's updates waiting elsewhere are
        applied before, others' after (``RequestLane``)."""
        loop, task, context = self._loop, self._task, self._context
        if TYPE_CHECKING:  # started: the offer found the task's waiter (no cost at run time)
            assert loop is not None and task is not None and context is not None
        try:
            enter_task(loop, task)
        except RuntimeError:  # offered from inside another task (or no inline start): queue it
            self._items.append(delivery)
            if delivery[2].reply_to is not None:
                self._hold(delivery[2].participant_id)
            waiter.set_result(None)
            return
        handler, message, metadata, topic = delivery
        if metadata.reply_to is not None:
            self._hold(metadata.participant_id)
        try:
            coro = handler(message, RuntimeContext(self.runtime, self.name, metadata, topic))
            yielded = context.run(coro.send, None)
        except StopIteration as done:
            if metadata.reply_to is not None:
                self._reply(metadata, topic, done.value)
        except asyncio.CancelledError:
            self._failed(topic, metadata, "cancelled")
        except Exception as error:  # an actor never dies of its handler
            self._failed(topic, metadata, error)
        else:
            self._handoff = _Suspended(coro, yielded, metadata, topic)
            # done: the handler cancelled the task; the task wakes to that anyway
            if not waiter.done():
                waiter.set_result(None)
        finally:
            leave_task(loop, task)
            self._unhold(at_once=False)

    def _failed(self, topic: Topic, metadata: MessageMetadata, error: BaseException | str) -> None:
        self.faults += 1
        try:
            self.host.handler_failed(self.name, topic, metadata, error)
        except Exception as report_error:  # the report itself must not end the worker either
            self.host.actor_fault(self.name, "report", topic, metadata, report_error)

    def _reply(self, metadata: MessageMetadata, topic: Topic, result: Any) -> None:
        try:
            self.host.reply(metadata, result)
        except Exception as error:  # e.g. an envelope no edge check caught: a fault, not the end
            self.faults += 1
            self.host.actor_fault(self.name, "reply", topic, metadata, error)

    def _before_requests(self, lane: RequestLane, head: Latest) -> Latest | None:
        """The update to take while ``lane`` is held and ``head`` (taken off the queue) would
        wait for it: None (wait) unless an update of a participant with a held request is
        queued, which that request must see applied. That update is taken out of the queue
        when only updates are ahead of it (it takes their place, as a coalesced update takes
        its first one's: updates of different keys keep no order among themselves); behind a
        plain delivery, ``head`` is taken instead (in order, without waiting), since nothing
        may overtake a plain delivery that came before it.
        """
        items = self._items
        plain = False
        for index, item in enumerate(items):
            if not isinstance(item, Latest):
                plain = True
            elif lane.holds_for(item.delivery[2].participant_id):
                if plain:
                    return head
                del items[index]
                return item
        return None

    async def _behind_requests(self, lane: RequestLane) -> bool:
        """Wait until no request queued for an idle actor holds ``lane`` (True), or a request
        of another participant is held (False: its updates may be queued here); a
        ``cancel_stuck`` meanwhile (nothing is in flight) only ends the wait (True)."""
        try:
            return await lane.clear()
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not self._unstick or self._stopping:
                raise
            self._unstick = False
            if current is not None and current.uncancel():
                raise  # also cancelled by someone else
            return True

    async def _run(self, call_on_start: bool) -> None:
        runtime = self.runtime
        if call_on_start:
            await self.host.guarded_hook(self.agent, "on_start", self)
        items = self._items
        loop = self._loop
        if TYPE_CHECKING:  # start() set it before creating this task
            assert loop is not None
        lane = self._lane
        if TYPE_CHECKING:  # start() set it too
            assert lane is not None
        handling: Awaitable[Any]
        waited = False
        while True:
            if items:
                item = items.popleft()
                if (  # a request elsewhere goes first (once), unless it is the participant's
                    isinstance(item, Latest)
                    and lane.held
                    and not waited
                    and not lane.holds_for(item.delivery[2].participant_id)
                ):
                    taken = self._before_requests(lane, item)
                    if taken is not item:
                        items.appendleft(item)
                        if taken is None:  # once the lane cleared, the head goes (no starving)
                            waited = await self._behind_requests(lane)
                            continue
                        item = taken
                if isinstance(item, Latest):
                    waited = False
                    del self._latest[item.key]
                    delivery: Delivery = item.delivery
                else:
                    delivery = item
                handler, message, metadata, topic = delivery
                if self._holding:
                    self._unhold(at_once=False)
                try:
                    handling = handler(message, RuntimeContext(runtime, self.name, metadata, topic))
                except Exception as error:  # not even a coroutine: a fault of this message
                    self._failed(topic, metadata, error)
                    continue
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
                if self._unstick and not self._stopping:  # cancel_stuck: the actor goes on
                    self._unstick = False
                    if current is not None and current.uncancel():
                        raise  # also cancelled by someone else
                    self._failed(topic, metadata, "cancelled: stuck (the actor was restarted)")
                    continue
                if current is not None and current.cancelling():  # this task is being cancelled
                    raise
                self._failed(topic, metadata, "cancelled")
            except Exception as error:  # an actor never dies of its handler
                self._failed(topic, metadata, error)
            else:
                if metadata.reply_to is not None:
                    self._reply(metadata, topic, result)
            if self._unstick:  # the handler swallowed cancel_stuck's cancellation and returned
                self._unstick = False
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()


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
