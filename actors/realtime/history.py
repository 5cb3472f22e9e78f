"""A realtime session's rollovers as they happened: their phases, and whether they worked.

``RolloverHistory`` is told when a rollover was requested, when the old session closed
and when the new one was ready; from that it keeps each rollover's (or reconnect's)
``RolloverRecord`` (the last ``MAX_RECORDS``, the gauges' ``rollover_<phase>_ms``) and
logs it as ``realtime.rollover``.

It also guards against a rollover loop (``check_effective``): a new session whose seed
alone is over ``rollover_at`` would roll over again after its first response. Such a
rollover is counted (``ineffective_rollovers``) and the next checkpoint keeps half the
tail verbatim (more of it summarized); after ``MAX_INEFFECTIVE`` in a row the session
stops rolling over proactively (policy ``natural``: the checkpoint waits for the next
disconnect; ``rollover_loop_stopped``), logged as an error.

No I/O: the session calls it under its lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from .checkpoint import Checkpointer
from .pressure import Pressure
from .rollover import Phase, RolloverMachine

MAX_RECORDS = 32
MAX_INEFFECTIVE = 2
"""Rollovers in a row that start above ``rollover_at`` before proactive rollover stops."""


@dataclass(frozen=True, slots=True)
class RolloverRecord:
    """One rollover (or reconnect) and its phases, in seconds."""

    epoch: int
    reason: str
    waited_s: float
    """Boundary wait: from the rollover request to the safe boundary (the old session closed)."""
    connect_s: float
    """From closing the old session to the new one's ready acknowledgement."""
    replay_s: float
    backlog: int
    """Input items buffered and replayed in order."""
    checkpoint_s: float = 0.0
    """Of ``connect_s``: waiting for the checkpoint in progress (and a retry's backoff)."""
    handshake_s: float = 0.0
    """Of ``connect_s``: the provider's connect up to its ready acknowledgement."""

    def phases(self) -> dict[str, float]:
        """The phases by the names the gauges use (``rollover_<phase>_ms``)."""
        return {
            "boundary_wait": self.waited_s,
            "checkpoint": self.checkpoint_s,
            "handshake": self.handshake_s,
            "connect": self.connect_s,
            "replay": self.replay_s,
        }


class RolloverHistory:
    """See the module docstring."""

    def __init__(
        self, log: structlog.typing.FilteringBoundLogger, clock: Callable[[], float]
    ) -> None:
        self.log = log
        self._clock = clock
        self.records: deque[RolloverRecord] = deque(maxlen=MAX_RECORDS)
        self.requested_at: float | None = None
        self.closing_at: float | None = None
        self.ineffective = 0
        """Rollovers in a row whose new session started above ``rollover_at``."""

    def requested(self) -> None:
        """A rollover was requested (the first request of several counts)."""
        if self.requested_at is None:
            self.requested_at = self._clock()

    def abandoned(self) -> None:
        """The requested rollover was given up."""
        self.requested_at = None

    def closing(self) -> None:
        """The old session closed (or was lost)."""
        self.closing_at = self._clock()

    def ready(
        self,
        machine: RolloverMachine,
        *,
        epoch: int,
        phase: Phase,
        started: float,
        ready_at: float,
        replay_s: float,
        backlog: int,
        seeded_items: int,
    ) -> None:
        """The session of ``epoch`` is ready: the connect began at ``started`` (after the
        checkpoint), the handshake ended at ``ready_at``; ``phase`` is the machine's phase
        before it was ready (a rollover or reconnect is recorded, the first start is not)."""
        if phase not in (Phase.ROLLING, Phase.RECONNECTING):
            return
        closing = self.closing_at if self.closing_at is not None else started
        requested = self.requested_at if self.requested_at is not None else closing
        record = RolloverRecord(
            epoch,
            "rollover" if phase is Phase.ROLLING else "disconnected",
            max(0.0, closing - requested),
            ready_at - closing,
            replay_s,
            backlog,
            checkpoint_s=max(0.0, started - closing),
            handshake_s=ready_at - started,
        )
        self.records.append(record)
        self.requested_at = None
        self.closing_at = None
        self.log.info(
            "realtime.rollover",
            epoch=record.epoch,
            reason=record.reason,
            waited_s=round(record.waited_s, 4),
            checkpoint_s=round(record.checkpoint_s, 4),
            handshake_s=round(record.handshake_s, 4),
            connect_s=round(record.connect_s, 4),
            replay_s=round(record.replay_s, 4),
            backlog=backlog,
            seeded_items=seeded_items,
            stale_events=machine.counts["stale_events"],
            policy=machine.policy,
        )

    def check_effective(
        self,
        pressure: Pressure,
        rollover_at: float,
        *,
        machine: RolloverMachine,
        checkpointer: Checkpointer,
        seeded_items: int,
    ) -> None:
        """After a rollover: ``pressure`` is the new session's, from its seed alone."""
        if pressure.value < rollover_at:
            self.ineffective = 0
            return
        self.ineffective += 1
        machine.counts["ineffective_rollovers"] += 1
        checkpointer.keep_tail //= 2
        self.log.warning(
            "realtime.rollover_ineffective",
            pressure=round(pressure.value, 3),
            seeded_items=seeded_items,
            keep_tail=checkpointer.keep_tail,
            in_a_row=self.ineffective,
        )
        if self.ineffective >= MAX_INEFFECTIVE and machine.policy == "proactive":
            machine.policy = "natural"
            machine.counts["rollover_loop_stopped"] += 1
            self.log.error(
                "realtime.rollover_loop_stopped",
                pressure=round(pressure.value, 3),
                in_a_row=self.ineffective,
            )
