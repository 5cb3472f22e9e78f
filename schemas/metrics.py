"""Runtime metrics: what every runtime publishes periodically (``xrmq top``, heartbeats)."""

from __future__ import annotations

from typing import Literal

import msgspec


class RuntimeCounters(msgspec.Struct, frozen=True, kw_only=True):
    """The totals a runtime counts, since it started: the one list of their names.

    The runtime keeps them as ``dict.fromkeys(RUNTIME_COUNTERS, 0)``, ``RuntimeMetrics``
    carries each as a field of the same name (flat on the wire, so a reader in any language
    sees plain keys), and ``xrmq top``'s rows are ``RuntimeCounters`` too
    (``counters_of(metrics)``).
    """

    published: int = 0
    delivered: int = 0
    gaps: int = 0
    stale: int = 0
    rejected: int = 0
    overflow: int = 0
    handler_errors: int = 0
    faults: int = 0
    actor_restarts: int = 0
    stuck_restarts: int = 0
    oversize: int = 0
    evicted: int = 0
    coalesced: int = 0


RUNTIME_COUNTERS: tuple[str, ...] = RuntimeCounters.__struct_fields__
"""The counter names, in order (every one is also a field of ``RuntimeMetrics``)."""


class StreamTails(msgspec.Struct, frozen=True):
    """A stopped runtime's last seq on each stream key (``RuntimeMetrics.last_seq``'s form)."""

    sender: str
    epoch: int
    last_seq: dict[str, int]


class RuntimeMetrics(msgspec.Struct, frozen=True, omit_defaults=True):
    """One runtime's counters at one moment; also its heartbeat.

    Counters are totals since the runtime started (rates are differences between two
    reports). ``actors`` maps each actor (keyed instances as ``kind[key]``) to its
    mailbox depth; ``gauges`` carries what actors report of themselves (for example
    ``context.participants`` or ``context.compaction_backlog``). The broker of a secure
    bus reports too (runtime ``broker``), with its per-identity ``dropped`` and ``denied``.

    Robustness counters: ``faults`` (exceptions in an actor's path: handler, reply,
    hooks, gauges; ``actor_faults`` per actor), ``actor_restarts`` (mailbox tasks that
    ended and were started again), ``rejected_by`` (rejected messages per category, see
    ``xrmq.actors.runtime.edge_checks``), ``oversize`` (payloads refused for exceeding
    ``max_message_bytes``), ``evicted``/``evicted_by`` (entries evicted from bounded
    tables, per table), ``tables`` (their sizes now) and ``resynced`` (streams that
    followed their sender again after a forged higher seq, see ``sequence``).
    ``last_seq`` maps the wire key (``topic NUL participant NUL``) of each stream this
    runtime sent on since its last heartbeat, and of up to 256 others in turn, to its
    last seq, so a receiver detects a lost tail within one heartbeat.
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
    faults: int = 0
    actor_restarts: int = 0
    stuck_restarts: int = 0
    """Stuck actors restarted: the handler in flight cancelled, the mailbox kept."""
    oversize: int = 0
    evicted: int = 0
    rejected_by: dict[str, int] = {}
    evicted_by: dict[str, int] = {}
    actor_faults: dict[str, int] = {}
    tables: dict[str, int] = {}
    last_seq: dict[str, int] = {}
    resynced: int = 0
    stuck: dict[str, float] = {}
    """Actors whose mailbox is non-empty and has not moved for the runtime's
    ``stuck_after`` seconds, with the seconds since it last moved (``xrmq top``)."""
    identity: str | None = None
    """The bus identity the runtime connected as (CURVE: its key's name); None on a plain bus."""
    dropped: dict[str, int] = {}
    """Only the secure broker's report: messages it dropped, by the identity that sent them."""
    denied: dict[str, int] = {}
    """Only the secure broker's report: subscriptions it refused, by the identity that asked."""
    subscriptions: dict[str, int] = {}
    """Only the broker's report: live subscriptions per topic (``_inbox.*``/``_probe.*`` for
    every private topic together); ``xrmq topics`` shows them as subscriber counts."""
    coalesced: int = 0
    """Superseding updates (such as context section views) replaced, while queued in a
    mailbox, by a newer one of the same key (``xrmq.actors.runtime.superseding``)."""
    final: bool = False
    """The runtime is stopping: this heartbeat's ``last_seq`` is its streams' tails."""
    tails: list[StreamTails] = []
    """Only the broker's report: the final ``last_seq`` of runtimes that stopped lately,
    repeated for a few heartbeats, so a subscriber whose queue was full when the final
    heartbeat passed still counts the tail it lost (``broker_report.TailReplay``)."""


def counters_of(metrics: RuntimeMetrics) -> dict[str, int]:
    """The ``RuntimeCounters`` fields of a report, by name (keyword arguments for a
    ``RuntimeCounters`` or a subclass of it)."""
    return {name: getattr(metrics, name) for name in RUNTIME_COUNTERS}


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
