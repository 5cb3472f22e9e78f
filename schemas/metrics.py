"""Runtime metrics: what every runtime publishes periodically (``xrmq top``, heartbeats)."""

from __future__ import annotations

import msgspec


class RuntimeMetrics(msgspec.Struct, frozen=True, omit_defaults=True):
    """One runtime's counters at one moment; also its heartbeat.

    Counters are totals since the runtime started (rates are differences between two
    reports). ``actors`` maps each actor (keyed instances as ``kind[key]``) to its
    mailbox depth; ``gauges`` carries what actors report of themselves (for example
    ``context.participants`` or ``context.compaction_backlog``). The broker of a secure
    bus reports too (runtime ``broker``), with its per-identity ``dropped`` and ``denied``.
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
    identity: str | None = None
    """The bus identity the runtime connected as (CURVE: its key's name); None on a plain bus."""
    dropped: dict[str, int] = {}
    """Only the secure broker's report: messages it dropped, by the identity that sent them."""
    denied: dict[str, int] = {}
    """Only the secure broker's report: subscriptions it refused, by the identity that asked."""
