"""The rollover state machine of one participant's realtime session, sans I/O.

Why a pure machine: what may be sent where, what is buffered, when a session is
replaced and which provider events still count are the subtle part of a rollover, and
they are testable without a socket or a clock. The shell (``session.py``) feeds calls
in and performs the returned effects in order.

Contract:

* Every connection attempt gets a new **epoch** (1, 2, 3...). The shell tags each
  provider event with the epoch of the connection that produced it and asks
  :meth:`RolloverMachine.accept`; an event of an older epoch (a late ``response.done``
  or error of a closed session) is dropped and counted in ``counts["stale_events"]``.
* Input (:class:`InputItem`: audio, a commit, a text turn) goes straight to the current
  session while it is ready (:class:`Send`); otherwise into a bounded backlog that is
  replayed in order, before anything newer, once the provider acknowledged the new
  session (:meth:`ready`). Overflow is explicit: ``overflow="drop_oldest"`` (default)
  or ``"drop_newest"`` drops one item, counts it and returns :class:`Overflowed`.
* :meth:`request_rollover` schedules a rollover; it starts only at a safe boundary
  (:class:`~.boundary.Boundary`), at once if the boundary is safe, else as soon as it
  becomes safe. While it waits, a new turn (commit, text) and all input after it is held
  in the backlog for the new session, so a brisk conversation cannot postpone it for
  ever; a boundary that stays unsafe (an open user turn, a playback whose end never
  comes) is bounded by the shell, which then calls :meth:`abandon_rollover`. Starting
  it: new input is buffered, :class:`Close` of the old epoch, then :class:`Connect` of
  the new one (the shell seeds it with the latest checkpoint).
* Policy ``"proactive"`` rolls over as above; ``"natural"`` only keeps the checkpoint for
  the next disconnect. A provider disconnect of the current session (expected or not)
  always reconnects the same way (:class:`Connect` with reason ``"disconnected"``).
* A failed connect is retried with a new epoch up to ``connect_attempts`` times in a
  row, buffering throughout; a proactive rollover that needed a retry falls back to
  ``"natural"`` for the rest of the participant's session (``counts["fallbacks"]``).
  When every attempt failed, :class:`GiveUp`: the backlog is dropped, counted.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from .boundary import Boundary

Policy = Literal["proactive", "natural"]
OverflowPolicy = Literal["drop_oldest", "drop_newest"]
ConnectReason = Literal["start", "rollover", "disconnected", "retry", "standby"]


@dataclass(frozen=True, slots=True)
class InputItem:
    """One input for the session, in the order the participant produced it."""

    kind: Literal["audio", "commit", "text"]
    seq: int
    """The participant's input counter (an audio frame's number, say)."""
    data: bytes = b""
    seconds: float = 0.0
    text: str = ""


@dataclass(frozen=True, slots=True)
class Send:
    epoch: int
    item: InputItem
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class Close:
    epoch: int


@dataclass(frozen=True, slots=True)
class Connect:
    epoch: int
    reason: ConnectReason


@dataclass(frozen=True, slots=True)
class Overflowed:
    dropped: InputItem
    policy: OverflowPolicy


@dataclass(frozen=True, slots=True)
class GiveUp:
    reason: str
    dropped: int


Effect = Send | Close | Connect | Overflowed | GiveUp


class Phase(Enum):
    IDLE = "idle"
    CONNECTING = "connecting"
    STREAMING = "streaming"
    ROLLING = "rolling"
    RECONNECTING = "reconnecting"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class MachineSettings:
    policy: Policy = "proactive"
    backlog_items: int = 500
    """Backlog capacity in items (500 frames of 20 ms: 10 s of speech)."""
    overflow: OverflowPolicy = "drop_oldest"
    connect_attempts: int = 3

    def __post_init__(self) -> None:
        if self.policy not in ("proactive", "natural"):
            raise ValueError("MachineSettings.policy: must be 'proactive' or 'natural'")
        if self.overflow not in ("drop_oldest", "drop_newest"):
            raise ValueError("MachineSettings.overflow: must be 'drop_oldest' or 'drop_newest'")
        if self.backlog_items < 1:
            raise ValueError("MachineSettings.backlog_items: must be >= 1")
        if self.connect_attempts < 1:
            raise ValueError("MachineSettings.connect_attempts: must be >= 1")


class RolloverMachine:
    """One participant's session lifecycle; see the module docstring."""

    def __init__(self, settings: MachineSettings | None = None) -> None:
        self.settings = MachineSettings() if settings is None else settings
        self.policy: Policy = self.settings.policy
        self.phase = Phase.IDLE
        self.epoch = 0
        self.boundary = Boundary()
        self.backlog: deque[InputItem] = deque()
        self.scheduled: str | None = None
        """Why a rollover waits for a safe boundary (None: none scheduled)."""
        self.standby_ready = False
        """A standby session is connected and seeded: the rollover switches to it."""
        self.counts: Counter[str] = Counter()
        self._failures = 0
        self._rolling_reason: ConnectReason | None = None
        self._needed_retry = False

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> list[Effect]:
        if self.phase is not Phase.IDLE:
            return []
        return self._connect(Phase.CONNECTING, "start")

    def ready(self, epoch: int) -> list[Effect]:
        """The provider acknowledged session ``epoch``: replay the backlog, then stream."""
        if not self.accept(epoch) or self.phase not in (
            Phase.CONNECTING,
            Phase.ROLLING,
            Phase.RECONNECTING,
        ):
            return []
        if self.phase is Phase.ROLLING:
            self.counts["rollovers"] += 1
            if self._needed_retry and self.policy == "proactive":
                self.policy = "natural"
                self.counts["fallbacks"] += 1
        elif self.phase is Phase.RECONNECTING:
            self.counts["reconnects"] += 1
        self.phase = Phase.STREAMING
        self._failures = 0
        self._needed_retry = False
        sends = [Send(epoch, item, replayed=True) for item in self.backlog]
        self.backlog.clear()
        self.counts["replayed"] += len(sends)
        if any(send.item.kind != "audio" for send in sends):
            self.boundary.response_active = True
        return list(sends)

    def connect_failed(self, epoch: int) -> list[Effect]:
        """Connecting session ``epoch`` failed (refused, or no ready acknowledgement)."""
        if not self.accept(epoch) or self.phase not in (
            Phase.CONNECTING,
            Phase.ROLLING,
            Phase.RECONNECTING,
        ):
            return []
        self.counts["connect_failures"] += 1
        self._failures += 1
        if self._failures >= self.settings.connect_attempts:
            dropped = len(self.backlog)
            self.backlog.clear()
            self.counts["backlog_dropped"] += dropped
            self.phase = Phase.FAILED
            return [GiveUp(f"{self._failures} connect attempts failed", dropped)]
        self._needed_retry = True
        self.epoch += 1
        return [Connect(self.epoch, "retry")]

    def disconnected(self, epoch: int) -> list[Effect]:
        """The provider closed session ``epoch`` (an old epoch's close is stale)."""
        if not self.accept(epoch):
            return []
        if self.phase is not Phase.STREAMING:
            return self.connect_failed(epoch)
        self.boundary.response_active = False
        self.boundary.user_turn_open = False
        self.scheduled = None
        return self._connect(Phase.RECONNECTING, "disconnected")

    def close(self) -> list[Effect]:
        """The participant is done: close the session, drop the backlog (counted)."""
        if self.phase in (Phase.CLOSED, Phase.IDLE):
            self.phase = Phase.CLOSED
            return []
        self.counts["backlog_dropped"] += len(self.backlog)
        self.backlog.clear()
        self.phase = Phase.CLOSED
        return [Close(self.epoch)]

    # -- events and input -----------------------------------------------------------

    def accept(self, epoch: int) -> bool:
        """Whether an event of ``epoch`` may act; a stale one is counted."""
        if epoch == self.epoch and self.phase is not Phase.CLOSED:
            return True
        self.counts["stale_events"] += 1
        return False

    def input(self, item: InputItem) -> list[Effect]:
        """Send or buffer ``item``. A commit or text turn asks for a response, so the
        response counts as in progress from then (the boundary is unsafe until it is done)."""
        if self.phase is Phase.STREAMING and not self._holding(item):
            if item.kind != "audio":
                self.boundary.response_active = True
            return [Send(self.epoch, item)]
        if self.phase in (Phase.CLOSED, Phase.FAILED):
            self.counts["input_dropped"] += 1
            return []
        self.counts["buffered"] += 1
        if len(self.backlog) < self.settings.backlog_items:
            self.backlog.append(item)
            return []
        self.counts["overflow"] += 1
        if self.settings.overflow == "drop_oldest":
            dropped = self.backlog.popleft()
            self.backlog.append(item)
        else:
            dropped = item
        return [Overflowed(dropped, self.settings.overflow)]

    def _holding(self, item: InputItem) -> bool:
        """Whether a scheduled rollover holds ``item`` back for the next session.

        A new turn (a commit, a text turn) would start another response in the old
        session and keep the boundary unsafe for ever in a brisk conversation; so while a
        rollover waits for the current response and its playback, a new turn and
        everything after it (to keep the order) wait in the backlog for the new session.
        """
        if self.scheduled is None or self.boundary.user_turn_open:
            return False
        if self.backlog or item.kind != "audio":
            self.counts["held_for_rollover"] += 1
            return True
        return False

    # -- the boundary -----------------------------------------------------------------

    def user_turn(self, open_: bool) -> list[Effect]:
        self.boundary.user_turn_open = open_
        return self._maybe_roll()

    def response(self, active: bool) -> list[Effect]:
        self.boundary.response_active = active
        return self._maybe_roll()

    def tools(self, pending: int) -> list[Effect]:
        self.boundary.pending_tools = max(0, pending)
        return self._maybe_roll()

    def playback(self, playing: bool) -> list[Effect]:
        self.boundary.playing = playing
        return self._maybe_roll()

    def request_rollover(self, reason: str) -> list[Effect]:
        """Schedule a proactive rollover (kept for the next disconnect under ``natural``)."""
        if self.phase is not Phase.STREAMING:
            return []
        if self.policy == "natural":
            self.counts["deferred_to_disconnect"] += 1
            return []
        self.scheduled = reason
        return self._maybe_roll()

    def abandon_rollover(self) -> list[Effect]:
        """Give up the scheduled rollover (its boundary never came safe in time): the
        session is kept until its natural end (the next disconnect reconnects with the
        checkpoint), counted in ``counts["boundary_timeouts"]``; input held back for the
        new session goes to the current one, in order."""
        if self.scheduled is None:
            return []
        self.scheduled = None
        self.counts["boundary_timeouts"] += 1
        if self.phase is not Phase.STREAMING:
            return []
        sends = [Send(self.epoch, item) for item in self.backlog]
        self.backlog.clear()
        if any(send.item.kind != "audio" for send in sends):
            self.boundary.response_active = True
        return list(sends)

    def _maybe_roll(self) -> list[Effect]:
        if self.scheduled is None or self.phase is not Phase.STREAMING or not self.boundary.safe:
            return []
        self.scheduled = None
        old = self.epoch
        if self.standby_ready:  # make before break: the new session first, then the close
            self.standby_ready = False
            return [*self._connect(Phase.ROLLING, "standby"), Close(old)]
        return [Close(old), *self._connect(Phase.ROLLING, "rollover")]

    def _connect(self, phase: Phase, reason: ConnectReason) -> list[Effect]:
        self.phase = phase
        self.epoch += 1
        self._failures = 0
        self._needed_retry = False
        return [Connect(self.epoch, reason)]
