"""``xrmq top``: a live view of every runtime on the bus, from the ``RuntimeMetrics`` they publish.

``TopView`` is pure: it keeps each runtime's last two reports and turns them into rows
(message rates are differences between two reports of the same incarnation; a new
epoch means the process restarted). It also keeps the last ``SupervisorReport`` of
``xrmq up``: a process it left down (over its crash limit) or is restarting gets its
state and reason on its row, and a row of its own if it never reported. Actors the
runtime reports stuck (non-empty mailbox, no progress) are marked. ``render`` draws
the rows as plain text with ANSI emphasis, under ``summary``'s header (the bus and its
broker, totals over every runtime); ``--json`` prints the rows for scripts and tests.
Below the runtimes, the conversation pane: per participant, from the router's
``TurnRecord`` on ``xrmq.turns``, the last turn's stage breakdown, p50/p95 of query to
first chunk, and the tokens and cost so far (``turns.TurnStats.pane``; text only).
Live on a terminal, ``q`` quits. Restarts count what ``top`` saw (new epochs while it
watched).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any, TextIO, cast

import msgspec

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.runtime.security.keys import client_credentials
from xrmq.schemas import RuntimeMetrics, SupervisorReport, TurnRecord
from xrmq.schemas.metrics import RuntimeCounters, counters_of
from xrmq.topics import METRICS_TOPIC, SUPERVISOR_TOPIC, TURNS_TOPIC

from .turns import TurnStats

BOLD, DIM, RED, RESET = "\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[0m"
CLEAR = "\x1b[H\x1b[2J"


class RuntimeRow(RuntimeCounters, frozen=True, kw_only=True):
    """What ``xrmq top`` shows of one runtime: its counters (``RuntimeCounters``) and these."""

    runtime: str
    pid: int
    age_s: float
    """Seconds since its last report (a stalled or dead process grows old)."""
    restarts: int
    """New epochs seen since ``top`` started watching."""
    published_per_s: float | None
    delivered_per_s: float | None
    """None until two reports of the same incarnation have arrived."""
    actors: dict[str, int]
    """Mailbox depth of each actor."""
    gauges: dict[str, float]
    actor_faults: dict[str, int] = {}
    """Exceptions survived in actors' paths (``faults``), per actor."""
    rejected_by: dict[str, int] = {}
    """Rejected messages per category (``edge_checks``)."""
    evicted_by: dict[str, int] = {}
    """Entries evicted from bounded tables (``evicted``), per table."""
    stuck: dict[str, float] = {}
    """Actors with a non-empty mailbox that has not moved, and for how many seconds."""
    state: str = "running"
    """The supervisor's word on it: ``running``, ``starting``, ``restarting`` or ``down``."""
    reason: str = ""
    """Why it is down."""
    identity: str | None = None
    """The bus identity it connected as (a CURVE bus), else None."""
    dropped: dict[str, int] = {}
    """The secure broker's row: messages it dropped, by sending identity."""
    denied: dict[str, int] = {}
    """The secure broker's row: subscriptions it refused, by identity."""


class _Seen:
    __slots__ = ("last", "previous", "received_at", "reports", "restarts")

    def __init__(self, metrics: RuntimeMetrics, received_at: float) -> None:
        self.previous: RuntimeMetrics | None
        self.last, self.previous, self.received_at, self.restarts, self.reports = (
            metrics,
            None,
            received_at,
            0,
            1,
        )


class TopView:
    """The latest state of every runtime that has reported."""

    def __init__(self) -> None:
        self._runtimes: dict[str, _Seen] = {}
        self._supervisor: SupervisorReport | None = None
        self.turns = TurnStats()
        """The turns seen since ``top`` started: its conversation pane."""

    def observe_supervisor(self, report: SupervisorReport) -> None:
        self._supervisor = report

    def observe(self, metrics: RuntimeMetrics, received_at: float) -> None:
        seen = self._runtimes.get(metrics.runtime)
        if seen is None:
            self._runtimes[metrics.runtime] = _Seen(metrics, received_at)
            return
        if metrics.epoch != seen.last.epoch:
            seen.restarts += 1
            seen.previous = None
        else:
            seen.previous = seen.last
        seen.last, seen.received_at = metrics, received_at
        seen.reports += 1

    def reports(self, runtime: str) -> int:
        seen = self._runtimes.get(runtime)
        return 0 if seen is None else seen.reports

    def rows(self, now: float) -> list[RuntimeRow]:
        """One row per runtime, by name; ``now`` is on the clock ``observe`` was given."""
        rows = []
        processes = self._supervisor.by_process() if self._supervisor is not None else {}
        never_reported = {
            name: state
            for name, state in processes.items()
            if name not in self._runtimes and state.state != "running"
        }
        for name, state in never_reported.items():
            rows.append(
                RuntimeRow(
                    runtime=name,
                    pid=state.pid,
                    age_s=0.0,
                    restarts=state.restarts,
                    published_per_s=None,
                    delivered_per_s=None,
                    actors={},
                    gauges={},
                    state=state.state,
                    reason=state.reason,
                )
            )
        for name in sorted(self._runtimes):
            seen = self._runtimes[name]
            supervised = processes.get(name)
            last, previous = seen.last, seen.previous
            rate = None
            if previous is not None and last.timestamp_us > previous.timestamp_us:
                span = (last.timestamp_us - previous.timestamp_us) / 1e6
                rate = (
                    (last.published - previous.published) / span,
                    (last.delivered - previous.delivered) / span,
                )
            rows.append(
                RuntimeRow(
                    runtime=name,
                    pid=last.pid,
                    age_s=max(0.0, now - seen.received_at),
                    restarts=seen.restarts,
                    published_per_s=None if rate is None else rate[0],
                    delivered_per_s=None if rate is None else rate[1],
                    **counters_of(last),
                    actors=dict(last.actors),
                    gauges=dict(last.gauges),
                    actor_faults=dict(last.actor_faults),
                    rejected_by=dict(last.rejected_by),
                    evicted_by=dict(last.evicted_by),
                    stuck=dict(last.stuck),
                    state=supervised.state if supervised is not None else "running",
                    reason=supervised.reason if supervised is not None else "",
                    identity=last.identity,
                    dropped=dict(last.dropped),
                    denied=dict(last.denied),
                )
            )
        return sorted(rows, key=lambda row: row.runtime)


def render(rows: list[RuntimeRow], *, stale_after_s: float = 5.0, color: bool = True) -> str:
    """The rows as text: a header per runtime, its counters, gauges and actors with mailbox depths.

    Problems (gaps, rejected frames, overflow, handler errors, a runtime silent for
    ``stale_after_s``, a stuck actor, a process down or restarting) are shown in red
    when ``color`` is on.
    """

    def paint(code: str, text: str) -> str:
        return f"{code}{text}{RESET}" if color else text

    def rate(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}/s"

    if not rows:
        return "no runtime has reported on the bus yet\n"
    lines = []
    for row in rows:
        age = f"{row.age_s:.1f}s ago"
        if row.state == "down":
            down = "DOWN: " + (row.reason or "left down")
            lines.append(f"{paint(BOLD, row.runtime)}  {paint(RED, down)}")
            continue
        shown_age = paint(RED, age + " (stale)") if row.age_s > stale_after_s else age
        header = f"{paint(BOLD, row.runtime)}  pid {row.pid}  {shown_age}"
        if row.identity is not None:
            header += f"  identity {row.identity}"
        if row.state != "running":
            header += f"  {paint(RED, row.state)}"
        if row.restarts:
            header += f"  {paint(RED, f'restarted {row.restarts}x')}"
        lines.append(header)
        for label, counts in (
            ("dropped from", row.dropped),
            ("subscriptions denied to", row.denied),
        ):
            if counts:
                lines.append(
                    f"  {paint(RED, label)} "
                    + "  ".join(f"{identity} {count}" for identity, count in sorted(counts.items()))
                )
        problems = []
        for label, value in (
            ("gaps", row.gaps),
            ("rejected", row.rejected),
            ("overflow", row.overflow),
            ("handler errors", row.handler_errors),
            ("faults", row.faults),
            ("actor restarts", row.actor_restarts),
            ("stuck restarts", row.stuck_restarts),
            ("stale", row.stale),
        ):
            text = f"{label} {value}"
            problems.append(paint(RED, text) if value and label != "stale" else text)
        lines.append(
            f"  in {rate(row.delivered_per_s)} ({row.delivered})  out {rate(row.published_per_s)}"
            f" ({row.published})  " + "  ".join(problems)
        )
        if row.rejected_by:
            lines.append("  rejected: " + _counts(row.rejected_by))
        if row.evicted_by or row.oversize:
            lines.append(
                "  evicted: "
                + _counts(row.evicted_by)
                + (f"  oversize refused {row.oversize}" if row.oversize else "")
            )
        gauges, tiers = _tier_gauges(row.gauges)
        gauges, sessions = _realtime_gauges(gauges)
        if gauges:
            lines.append(
                "  "
                + "  ".join(f"{name} {_number(value)}" for name, value in sorted(gauges.items()))
            )
        for destination, tier_counts in sorted(tiers.items()):
            lines.append(f"  tools {destination} compaction: " + _tier_line(tier_counts))
        for participant, values in sorted(sessions.items()):
            lines.extend(_realtime_lines(participant, values))
        for actor, depth in sorted(row.actors.items()):
            faults = row.actor_faults.get(actor)
            stuck = row.stuck.get(actor)
            mark = f"  {paint(RED, f'STUCK {stuck:.0f}s')}" if stuck is not None else ""
            if faults:
                mark += f"  {paint(RED, f'faults {faults}')}"
            lines.append(f"  {paint(DIM, 'mailbox')} {depth:>6}  {actor}{mark}")
    return "\n".join(lines) + "\n"


TIER_GAUGES = {
    "toolcall_rounds_total": "tier 1 rounds",
    "toolcall_reclaimed": "reclaimed",
    "summary_rounds": "tier 2 summaries",
    "nothing_to_condense": "nothing to condense",
    "summarize_failed": "summarize failed",
    "originals_evicted": "originals evicted",
}
"""A tools destination's seed-002 counters (gauges ``tools.NAME.<counter>``), as top labels them."""


def _tier_gauges(gauges: dict[str, float]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Split off the tools destinations' tier counters: (other gauges, {destination: counters})."""
    rest: dict[str, float] = {}
    tiers: dict[str, dict[str, float]] = {}
    for name, value in gauges.items():
        head, _, counter = name.rpartition(".")
        if name.startswith("tools.") and counter in TIER_GAUGES and head.count(".") == 1:
            tiers.setdefault(head.removeprefix("tools."), {})[counter] = value
        else:
            rest[name] = value
    return rest, tiers


def _tier_line(counts: dict[str, float]) -> str:
    return "  ".join(
        f"{label} {_number(counts.get(counter, 0))}" for counter, label in TIER_GAUGES.items()
    )


REALTIME_STATE = (
    ("pressure", "pressure"),
    ("epoch", "epoch"),
    ("rollovers", "rollovers"),
    ("reconnects", "reconnects"),
    ("backlog", "backlog"),
    ("replayed", "replayed"),
    ("overflow", "overflow"),
    ("stale_events", "stale drops"),
    ("fallbacks", "fallbacks"),
    ("boundary_timeouts", "boundary timeouts"),
    ("ineffective_rollovers", "ineffective"),
    ("standby_switches", "switches"),
    ("standby_fallbacks", "standby fallbacks"),
)
"""A realtime session's gauges (``realtime.<participant>.<name>``), as top labels them."""
STANDBY_STATES = ("unsupported", "idle", "connecting", "ready", "abandoned", "closed")
"""``realtime.<participant>.standby_state`` by index (the realtime standby's ``STATES``)."""
REALTIME_PHASES = ("boundary_wait", "checkpoint", "handshake", "connect", "replay")


def _realtime_gauges(
    gauges: dict[str, float],
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Split off the realtime sessions' gauges: (other gauges, {participant: gauges})."""
    rest: dict[str, float] = {}
    sessions: dict[str, dict[str, float]] = {}
    for name, value in gauges.items():
        head, _, field = name.rpartition(".")
        if name.startswith("realtime.") and head.count(".") == 1:
            sessions.setdefault(head.removeprefix("realtime."), {})[field] = value
        else:
            rest[name] = value
    return rest, sessions


def _realtime_lines(participant: str, values: dict[str, float]) -> list[str]:
    """A participant's realtime session: its state, its standby's (and the last switch's
    duration), and its last rollover's phases."""
    state = "  ".join(
        f"{label} {values[field]:g}" for field, label in REALTIME_STATE if field in values
    )
    lines = [f"  realtime {participant}: {state}"]
    if "standby_state" in values:
        index = int(values["standby_state"])
        standby = f"    standby {STANDBY_STATES[index] if index < len(STANDBY_STATES) else index}"
        if "standby_switch_ms" in values:
            standby += f", last switch {values['standby_switch_ms']:g} ms"
        lines.append(standby)
    phases = [
        f"{phase.replace('_', ' ')} {values[f'rollover_{phase}_ms']:g} ms"
        f" (p50 {values.get(f'rollover_{phase}_p50_ms', 0):g})"
        for phase in REALTIME_PHASES
        if f"rollover_{phase}_ms" in values
    ]
    if phases:
        backlog = values.get("rollover_backlog", 0)
        lines.append(f"    last rollover: {', '.join(phases)}, backlog replayed {backlog:g}")
    return lines


def _counts(counts: dict[str, int]) -> str:
    return "  ".join(f"{name} {count}" for name, count in sorted(counts.items()))


def summary(rows: list[RuntimeRow], bus: str, *, color: bool = True) -> str:
    """The header: the bus (its broker answered ``top``'s readiness probe) and totals."""

    def paint(code: str, text: str) -> str:
        return f"{code}{text}{RESET}" if color else text

    inbound = sum(row.delivered_per_s or 0.0 for row in rows)
    outbound = sum(row.published_per_s or 0.0 for row in rows)
    problems = {
        label: sum(getattr(row, field) for row in rows)
        for label, field in (
            ("gaps", "gaps"),
            ("rejected", "rejected"),
            ("overflow", "overflow"),
            ("handler errors", "handler_errors"),
        )
    }
    restarts = sum(row.restarts for row in rows)
    text = "  ".join(
        paint(RED, f"{label} {value}") if value else f"{label} {value}"
        for label, value in (*problems.items(), ("restarts", restarts))
    )
    return (
        f"{paint(BOLD, 'xrmq top')}  bus {bus}  broker: up  {len(rows)} runtimes  "
        f"in {inbound:.1f}/s  out {outbound:.1f}/s\n  {text}\n\n"
    )


def _quit_on_q(
    loop: asyncio.AbstractEventLoop, stop: asyncio.Event, stream: TextIO
) -> object | None:
    """On a terminal, read single keys and set ``stop`` on ``q``; returns the state to restore."""
    try:
        import termios
        import tty

        if not stream.isatty():
            return None
        fd = stream.fileno()
        saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)
    except (ImportError, OSError, ValueError, AttributeError):
        return None

    def key() -> None:
        if os.read(fd, 1) in (b"q", b"Q"):
            stop.set()

    loop.add_reader(fd, key)
    return fd, saved


def _restore(loop: asyncio.AbstractEventLoop, state: object | None) -> None:
    if state is None:
        return
    import termios

    fd, saved = cast(tuple[int, Any], state)
    loop.remove_reader(fd)
    termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class _MetricsWatcher(Agent):
    def __init__(self, view: TopView, changed: asyncio.Event) -> None:
        self.view = view
        self.changed = changed

    @subscribe(METRICS_TOPIC)
    async def on_metrics(self, message: RuntimeMetrics, ctx: RuntimeContext) -> None:
        self.view.observe(message, asyncio.get_running_loop().time())
        self.changed.set()

    @subscribe(SUPERVISOR_TOPIC)
    async def on_supervisor(self, message: SupervisorReport, ctx: RuntimeContext) -> None:
        self.view.observe_supervisor(message)
        self.changed.set()


class _TurnWatcher(Agent):
    def __init__(self, view: TopView) -> None:
        self.view = view

    @subscribe(TURNS_TOPIC)
    async def on_turn(self, message: TurnRecord, ctx: RuntimeContext) -> None:
        self.view.turns.observe(message)


async def watch(
    bus: str,
    *,
    once: bool,
    as_json: bool,
    interval: float,
    window: float,
    expect: int | None,
    out: TextIO = sys.stdout,
    turns: bool = True,
) -> int:
    """Subscribe to the metrics topic and print the view; with ``turns`` also to
    ``xrmq.turns``, for the conversation pane.

    ``once``: print one view and return, as soon as ``expect`` runtimes have each
    reported twice (so rates exist), else after ``window`` seconds. Otherwise redraw
    every ``interval`` seconds until SIGINT/SIGTERM.
    """
    view = TopView()
    changed = asyncio.Event()
    loop = asyncio.get_running_loop()
    keyed = client_credentials() is not None  # then its name must start with its identity's
    runtime = AgentRuntime(bus, name=None if keyed else f"top-{os.getpid()}")
    runtime.register("top", _MetricsWatcher(view, changed))
    if turns:
        runtime.register("top-turns", _TurnWatcher(view))
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with runtime:
        if once:
            deadline = loop.time() + window
            while (
                expect is None
                or sum(view.reports(row.runtime) >= 2 for row in view.rows(loop.time())) < expect
            ):
                changed.clear()
                remaining = deadline - loop.time()
                if remaining <= 0 or stop.is_set():
                    break
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except TimeoutError:
                    break
            _print(
                view.rows(loop.time()),
                bus,
                as_json=as_json,
                live=False,
                out=out,
                pane=view.turns.pane(),
            )
            return 0
        keys = None if as_json else _quit_on_q(loop, stop, sys.stdin)
        try:
            while not stop.is_set():
                _print(
                    view.rows(loop.time()),
                    bus,
                    as_json=as_json,
                    live=True,
                    out=out,
                    hint="q or Ctrl-C quits" if keys is not None else "Ctrl-C quits",
                    pane=view.turns.pane(),
                )
                try:
                    await asyncio.wait_for(stop.wait(), interval)
                except TimeoutError:
                    pass
        finally:
            _restore(loop, keys)
    return 0


def _print(
    rows: list[RuntimeRow],
    bus: str,
    *,
    as_json: bool,
    live: bool,
    out: TextIO,
    hint: str = "",
    pane: str = "",
) -> None:
    if as_json:
        out.write(msgspec.json.encode(rows).decode() + "\n")
    else:
        color = out.isatty()
        header = summary(rows, bus, color=color)
        if hint:
            header = header.rstrip("\n") + f"  ({hint})\n\n"
        body = render(rows, color=color) + ("\n" + pane if pane else "")
        out.write((CLEAR if live and color else "") + header + body)
    out.flush()


def _number(value: float) -> str:
    """A gauge as a person reads it: a whole number in full (4194304, not 4.1943e+06),
    anything else to four significant digits."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"
