"""Superseding updates: the newest replaces what is queued, and requests go first.

A handler marked ``@superseding(key)`` takes state updates where the newest of a key
replaces every older one: a context section's view (``SectionView``: a view replaces the
section's previous one whole, its acknowledgements are cumulative). Two rules of the
actor's mailbox follow from that, and only for such one-way deliveries:

- **Coalesced.** While an update waits in the mailbox, a newer one of the same
  participant and ``key(message)`` for the same handler replaces it in its place in the
  queue (the older is never handled: its successor carries everything it said). Each
  replacement is counted, in the mailbox (``Mailbox.coalesced``) and in the runtime's
  ``coalesced`` counter (``RuntimeMetrics``), so nothing is dropped without a count; a
  replacement takes no room in the mailbox, so a burst of one key never fills it.
- **Behind requests.** A request (an ask: its asker is waiting) that the reader queues
  for an idle actor holds this event loop's ``RequestLane`` until that actor has taken
  it; meanwhile a mailbox whose next delivery is a superseding update waits, and
  resumes only after the request's handler has taken its first step and what that
  step scheduled (an answer's task) has been queued ahead of it. Without this, a turn's
  request read behind a burst of section views waited for every one of them to be
  applied first, on the same event loop. The
  participant's own updates do not wait: one read before its request must be applied
  before it, or the turn is answered without a view its asker had already seen. That
  holds wherever it is queued: behind other participants' updates it is taken first (in
  their place), behind a plain delivery the queue goes on in order until it is applied.

A hold lasts at most until the idle actor's task runs, which is already scheduled when
the hold is taken (its mailbox was parked), so an update is delayed by a few loop
passes at most; a request for a busy actor (one that would wait behind its own queue
anyway) takes no hold. A hold is released when the actor takes the request, and also
when its worker stops or ends without taking it. Requests are never delayed by
updates, and an actor's own queue keeps its order: only superseding updates wait, and
only for requests queued in other mailboxes (the request at an actor's own head is its
next delivery anyway).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_KEY_ATTR = "__xrmq_supersedes__"


def superseding(key: Callable[[Any], Hashable]) -> Callable[[F], F]:
    """Mark an ``async def handler(self, message, ctx)`` of one-way state updates where the
    newest message of a participant and ``key(message)`` supersedes older ones.

    ``key`` must not raise for a message of the handler's topic; it names what one update
    replaces (for a section view: its section and the host that rendered it). A request
    (an ask) to the handler is never coalesced. See the module docstring for what the
    mailbox does with such updates.
    """
    if not callable(key):
        raise TypeError(f"superseding: key must be callable, got {type(key).__qualname__}")

    def decorate(func: F) -> F:
        setattr(func, _KEY_ATTR, key)
        return func

    return decorate


_keys: weakref.WeakKeyDictionary[type, dict[object, Callable[[Any], Hashable]]] = (
    weakref.WeakKeyDictionary()
)


def superseding_keys(agent_type: type) -> dict[object, Callable[[Any], Hashable]]:
    """The handler functions of ``agent_type`` marked ``@superseding``, with their keys
    (found once per class: a keyed kind spawns many instances of one)."""
    found = _keys.get(agent_type)
    if found is None:
        found = {}
        for klass in reversed(agent_type.__mro__):
            for member in vars(klass).values():
                key = getattr(member, _KEY_ATTR, None)
                if key is not None and callable(member):
                    found[member] = key
        _keys[agent_type] = found
    return found


class Latest:
    """A queued superseding update: its slot in the mailbox's queue, whose delivery a newer
    update of the same ``key`` replaces in place until the worker takes it."""

    __slots__ = ("delivery", "key")

    def __init__(self, key: Hashable, delivery: Any) -> None:
        self.key = key
        self.delivery: Any = delivery
        """The newest update of ``key`` (the mailbox's delivery tuple)."""


class RequestLane:
    """Requests queued for idle actors on one event loop, which superseding updates wait for.

    ``hold`` when such a request is queued (or starts its handler in the reader),
    ``release`` once when its actor took it (or can no longer take it), each with the
    request's participant; ``clear()`` is what an update's mailbox awaits while ``held``
    (a future of its own, so cancelling one waiter leaves the others waiting). An update
    of a participant with a held request does not wait (``holds_for``): it arrived before
    that participant's request, which must see it (a turn answered from the context as it
    was before a view its asker had seen). So a hold for a participant not held yet ends
    every wait with False ("look again": such an update may be queued in a waiting
    mailbox), and the last release ends them with True (cleared).
    """

    __slots__ = ("_participants", "_waiters", "held")

    def __init__(self) -> None:
        self.held = 0
        self._participants: dict[str | None, int] = {}
        self._waiters: list[asyncio.Future[bool]] = []

    def hold(self, participant_id: str | None = None) -> None:
        self.held += 1
        holds = self._participants.get(participant_id, 0)
        self._participants[participant_id] = holds + 1
        if not holds and participant_id is not None and self._waiters:
            self._wake(False)

    def release(self, participant_id: str | None = None) -> None:
        self.held -= 1
        left = self._participants.get(participant_id, 0) - 1
        if left > 0:
            self._participants[participant_id] = left
        else:
            self._participants.pop(participant_id, None)
        if not self.held and self._waiters:
            self._wake(True)

    def _wake(self, cleared: bool) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(cleared)

    def holds_for(self, participant_id: str | None) -> bool:
        """Whether a held request is of ``participant_id`` (a participant's own, not None)."""
        return participant_id is not None and participant_id in self._participants

    def clear(self) -> asyncio.Future[bool]:
        """A future done when no request holds the lane any more (True), or when a request
        of a participant not held before is held (False: look again)."""
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter


_lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RequestLane] = (
    weakref.WeakKeyDictionary()
)


def request_lane(loop: asyncio.AbstractEventLoop) -> RequestLane:
    """The lane of ``loop``: every runtime on one loop shares its ready queue, so its lane."""
    lane = _lanes.get(loop)
    if lane is None:
        lane = _lanes[loop] = RequestLane()
    return lane
