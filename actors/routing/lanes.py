"""The router's lanes, as pure bookkeeping: one participant's work runs after the last.

Why apart: rule 1 of ``router.py`` (turns serialized per participant; a new turn cancels
the previous one and waits until it drained; other participants independent) and the
bound on participants are bookkeeping over work handles, testable without an event loop.
``AgentRouter`` starts the tasks and cancels what ``Lanes.enter`` names; a handle here is
anything hashable (the router's are ``asyncio.Task``, the tests' are strings).

Contract:

* ``enter(participant)`` is called for each new piece of work (a turn or a departure). It
  returns the participant's lane (now the most recently active), the handles to cancel
  (the participant's turns in flight, and the turns of a lane evicted to make room) and
  the handles the new work must wait for (every earlier unfinished work of the
  participant, a departure included). The caller then ``add``s the new work's handle to
  the lane and calls ``Lane.done`` when it ends.
* At most ``max_participants`` lanes are kept: a new participant beyond it evicts the
  least recently active idle lane, else the least recently active one (its turns are
  among those to cancel); evictions are counted in ``evicted``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from .state import ParticipantRouting

H = TypeVar("H", bound=Hashable)


class Lane(Generic[H]):
    """One participant's unfinished work (``pending``), the cancellable part of it (``turns``)
    and the routing state."""

    __slots__ = ("pending", "state", "turns")

    def __init__(self, history_limit: int) -> None:
        self.pending: set[H] = set()
        self.turns: set[H] = set()
        self.state = ParticipantRouting(history_limit)

    def add(self, handle: H, *, turn: bool) -> None:
        """``handle`` is unfinished work of this lane; a ``turn`` is cancelled by newer work."""
        self.pending.add(handle)
        if turn:
            self.turns.add(handle)

    def done(self, handle: H) -> None:
        """``handle`` ended."""
        self.pending.discard(handle)
        self.turns.discard(handle)


@dataclass(frozen=True, slots=True)
class Entry(Generic[H]):
    """What new work of a participant gets from ``Lanes.enter``."""

    lane: Lane[H]
    cancel: tuple[H, ...]
    """Turns to cancel now: the participant's, then an evicted lane's."""
    after: frozenset[H]
    """Earlier unfinished work of the participant the new work waits for."""
    evicted: str | None
    """The participant whose lane was forgotten to make room, if any."""


class Lanes(Generic[H]):
    """Every participant's lane, least recently active first (iterating gives participant
    ids in that order)."""

    __slots__ = ("_lanes", "evicted", "history_limit", "max_participants")

    def __init__(self, max_participants: int, history_limit: int) -> None:
        self.max_participants = max_participants
        self.history_limit = history_limit
        self.evicted = 0
        """Lanes forgotten to keep at most ``max_participants``."""
        self._lanes: dict[str, Lane[H]] = {}

    def __len__(self) -> int:
        return len(self._lanes)

    def __iter__(self) -> Iterator[str]:
        return iter(self._lanes)

    def __contains__(self, participant_id: object) -> bool:
        return participant_id in self._lanes

    def enter(self, participant_id: str) -> Entry[H]:
        """New work for ``participant_id``: its lane, what to cancel and what to wait for."""
        lanes = self._lanes
        lane = lanes.pop(participant_id, None)
        evicted: str | None = None
        cancel: list[H] = []
        if lane is None:
            lane = Lane(self.history_limit)
            if len(lanes) >= self.max_participants:
                idle = (pid for pid, other in lanes.items() if not other.pending)
                evicted = next(idle, next(iter(lanes)))
                cancel += lanes.pop(evicted).turns
                self.evicted += 1
        lanes[participant_id] = lane  # the most recently active
        return Entry(lane, (*lane.turns, *cancel), frozenset(lane.pending), evicted)

    def turns(self, participant_id: str | None = None) -> list[H]:
        """The cancellable turns of ``participant_id`` (of every participant for None)."""
        if participant_id is None:
            return [task for lane in self._lanes.values() for task in lane.turns]
        lane = self._lanes.get(participant_id)
        return list(lane.turns) if lane is not None else []

    def pending(self) -> list[H]:
        """Every participant's unfinished work."""
        return [task for lane in self._lanes.values() for task in lane.pending]

    def forget(self, participant_id: str, lane: Lane[H], handle: H) -> bool:
        """Forget ``lane`` if it is still the participant's and ``handle`` (the departure) is
        its only unfinished work; True if it was forgotten."""
        if lane.pending == {handle} and self._lanes.get(participant_id) is lane:
            del self._lanes[participant_id]
            return True
        return False
