"""Runtime metrics: what every runtime publishes periodically (``xrmq top``, heartbeats)."""

from __future__ import annotations

from typing import Literal

import msgspec


class RuntimeMetrics(msgspec.Struct, frozen=True, omit_defaults=True):
    """One runtime's counters at one moment; also its heartbeat.

    Counters are totals since the runtime started (rates are differences between two
    reports). ``actors`` maps each actor (keyed instances as ``kind[key]``) to its
    mailbox depth; ``gauges`` carries what actors report of themselves (for example
    ``context.participants`` or ``context.compaction_backlog``).
    """

    runtime: str
    epoch: int
    pid: int
    timestamp_us: int
    published: int
    delivered: int
    gaps: int
    stale: int
    rejected: int
    overflow: int
    handler_errors: int
    actors: dict[str, int] = {}
    gauges: dict[str, float] = {}
    stuck: dict[str, float] = {}
    """Actors whose mailbox is non-empty and has not moved for the runtime's
    ``stuck_after`` seconds, with the seconds since it last moved (``xrmq top``)."""


ProcessStateName = Literal["starting", "running", "restarting", "down"]


class ProcessState(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the supervisor knows of one supervised process.

    ``down`` means the supervisor gave up on it (over its crash limit, ``on_give_up =
    "stay_down"``): it is left down, and ``reason`` says why.
    """

    process: str
    """The process's label (its runtime's name; ``bus`` for the broker)."""
    state: ProcessStateName
    pid: int = 0
    restarts: int = 0
    reason: str = ""


class SupervisorReport(msgspec.Struct, frozen=True, omit_defaults=True):
    """The supervisor's periodic report (``xrmq up``): every process it runs and its state.

    It is also the supervisor's probe of the broker: its own report coming back through
    the broker shows the broker is alive. Immutable all the way down (a tuple), so every
    local subscriber shares one decoded report.
    """

    supervisor: str
    pid: int
    timestamp_us: int
    processes: tuple[ProcessState, ...] = ()

    def by_process(self) -> dict[str, ProcessState]:
        """The processes by label."""
        return {state.process: state for state in self.processes}
