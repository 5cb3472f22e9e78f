"""Telemetry suite: what turn records and OTLP trace export cost the turn path, in CPU.

One deployment of the turn suite's processes (``turn_rig.Deployment``: broker, context
sections, compaction workers, conversation, router, client; zero-delay model), whose router
also hosts a ``TraceExporter`` sending to an OTLP/HTTP collector on loopback in this process
(it answers 200 and keeps a count). Each repetition runs the same zero-delay turns three
times, the router switched between them (``telemetry MODE``):

- ``off``: the router publishes no ``TurnRecord``;
- ``records`` (the box's default): every record published on ``xrmq.turns``;
- ``otlp``: every record published and handed to the exporter (one of the router's record
  observers, as in the box), which sends it as a trace; the window ends after the exporter
  flushed, so its sending is inside it.

The figure is the CPU of every process of the turn path (``Deployment.cpu_ns``: all
threads, the exporter's included) per turn. Telemetry runs in the router and the broker
alone, so its cost is what those two spend per turn beyond ``off``, over the whole turn's
CPU with ``off``, paired per round of three adjacent windows (one per mode), so a burst
of another program's load spoils one round, not a repetition; the bars hold its median over
the rounds: records <= 2 %, export <= 5 %. (The whole turn's CPU against ``off`` is
reported too: on a shared machine its differences are mostly the other processes' noise.)
Each repetition runs ``ROUNDS`` rounds, the modes' order rotating; repetition 0 warms up
and is discarded.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .stats import median
from .suite import Row, Suite, SuiteContext, SuiteResult, bar
from .turn_rig import Config, Deployment

PARTICIPANTS = 4
PAUSE_MS = 20
MODES = ("off", "records", "otlp")
ROUNDS = 3
"""Windows per mode and repetition, the modes interleaved (a slow drift of the machine's
load falls on all three alike)."""
HOSTS = ("router", "broker")
"""The processes telemetry runs in (the router builds, sends and exports the records, the
broker takes them)."""
RECORDS_LIMIT = 0.02
EXPORT_LIMIT = 0.05


class Collector:
    """An OTLP/HTTP collector on loopback that accepts everything: ``requests``, ``bytes``."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                self.rfile.read(length)
                collector.requests += 1
                collector.bytes += length
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def run(ctx: SuiteContext) -> SuiteResult:
    turns = 2 if ctx.quick else 25  # per participant and window; ROUNDS windows per mode
    participants = [f"p{i}" for i in range(PARTICIPANTS)]
    total: dict[str, list[float]] = {mode: [] for mode in MODES}
    hosts: dict[str, list[float]] = {mode: [] for mode in MODES}
    windows: list[dict[str, tuple[float, float]]] = []
    """Per round of the timed repetitions: mode -> (all processes, router + broker) per turn."""
    failed = 0
    flushed = True
    collector = Collector()
    try:
        with Deployment(Config(telemetry=collector.endpoint)) as deployment:
            ctx.progress(
                f"telemetry: {len(deployment.workers)} processes up; "
                f"{ROUNDS * turns * PARTICIPANTS} zero-delay turns per mode and repetition, "
                f"in {ROUNDS} windows each"
            )
            for rep in range(ctx.repetitions + 1):  # repetition 0 warms up
                spent = {mode: {"total": 0, "hosts": 0, "turns": 0} for mode in MODES}
                for round_ in range(ROUNDS):
                    window: dict[str, tuple[float, float]] = {}
                    shift = (rep + round_) % len(MODES)
                    for mode in MODES[shift:] + MODES[:shift]:
                        deployment.telemetry(mode)
                        before = deployment.cpu_ns()
                        result = deployment.turns(turns, participants, PAUSE_MS)
                        if mode == "otlp":
                            flushed = deployment.flush_traces() and flushed
                        after = deployment.cpu_ns()
                        used = {name: after[name] - before[name] for name in after}
                        timed = len(result["first_us"]) + result["failed"]
                        spent[mode]["total"] += sum(used.values())
                        spent[mode]["hosts"] += sum(used[name] for name in HOSTS)
                        spent[mode]["turns"] += timed
                        window[mode] = (
                            sum(used.values()) / 1000 / timed,
                            sum(used[name] for name in HOSTS) / 1000 / timed,
                        )
                        failed += result["failed"] if rep else 0
                    if rep:
                        windows.append(window)
                if rep == 0:
                    continue
                for mode, sums in spent.items():
                    total[mode].append(sums["total"] / 1000 / sums["turns"])
                    hosts[mode].append(sums["hosts"] / 1000 / sums["turns"])
                ctx.progress(
                    f"telemetry: rep {rep}/{ctx.repetitions} cpu per turn "
                    + ", ".join(
                        f"{mode} {total[mode][-1]:,.0f} us (router+broker {hosts[mode][-1]:,.0f})"
                        for mode in MODES
                    )
                )
    finally:
        collector.close()

    # The telemetry runs in the router and the broker alone: its cost is what they spend
    # beyond ``off``, against the whole turn's CPU (the other processes do the same work in
    # every mode, so their differences are only noise).
    def overhead(mode: str) -> list[float]:
        """Per round (three adjacent windows, one per mode): a burst of another program's
        load spoils one round, not a repetition."""
        return [(w[mode][1] - w["off"][1]) / w["off"][0] for w in windows]

    def whole(mode: str) -> list[float]:
        return [t / t_off - 1 for t, t_off in zip(total[mode], total["off"])]

    records, export = overhead("records"), overhead("otlp")
    group = "CPU per zero-delay turn, all processes of the turn path"
    rows = [
        Row(
            group=group,
            subject=f"telemetry {mode}",
            unit="us",
            median=median(values),
            repetitions=values,
            higher_is_better=False,
            extra={
                "router+broker us": median(hosts[mode]),
                **(
                    {}
                    if mode == "off"
                    else {
                        "overhead vs off": median(overhead(mode)),
                        "all processes vs off": median(whole(mode)),
                    }
                ),
            },
        )
        for mode, values in total.items()
    ]
    bars = (
        []
        if ctx.quick
        else [
            bar(
                "turn records cost <= 2 % of the turn's CPU",
                median(records),
                "<=",
                RECORDS_LIMIT,
                "paired per round: router+broker CPU beyond off / the turn's CPU off, median",
            ),
            bar(
                "OTLP export costs <= 5 % of the turn's CPU",
                median(export),
                "<=",
                EXPORT_LIMIT,
                "as above; the exporter flushed within each window",
            ),
        ]
    )
    notes = [
        f"{PARTICIPANTS} participants at once, {turns} sequential turns each per window, "
        f"{ROUNDS} windows per mode and repetition, the modes interleaved and rotated; think "
        f"time uniform in [0, {2 * PAUSE_MS}] ms; the workers log at WARNING, so ``off`` "
        "builds no record (the router neither publishes nor logs one)",
        f"collector: {collector.requests} OTLP requests, {collector.bytes:,} bytes"
        + ("" if flushed else "; an exporter flush timed out"),
    ]
    if failed:
        notes.append(f"{failed} turns failed")
    return SuiteResult(rows=rows, bars=bars, notes=notes)


SUITE = Suite("telemetry", "Telemetry: CPU of turn records and OTLP export per turn", run)
