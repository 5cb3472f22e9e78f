"""Storm suite: turn to first chunk while a compaction storm runs, against idle.

The turn suite's deployment (``turn_rig``) with a sensor process and a context
configured to compact all the time: small budgets (a compaction is due after a few
updates), a slow compaction model (``OfflineLLM(time_to_first_token_s=0.2,
tokens_per_second=20)``: about two seconds per summary) and enough worker
concurrency for one job per participant. The sensor publishes incremental updates on
the context topic for every participant at a high rate.

Each repetition measures zero-delay turns of a few of those participants twice, in the
same processes: idle (sensor stopped, no compaction job queued or running anywhere),
then during the storm (after its first compactions completed, so it is in full swing).
The bar is the design's "compaction never delays answers": p99 during the storm at
most 1.2x idle p99 (issue 23), as the median of three runs, each run's ratio the median
of its paired per-repetition ratios; a run is a fresh pair of deployments (so a slow
moment of the shared machine, or of one deployment, weighs one run). Compactions
completed and the sensor's updates during each storm phase show the storm was real;
each process's CPU share per phase shows where the storm's cost lands on the cores.

The whole measurement runs on two deployments alive together, measured in turn: one
whose sections journal every state change (issue 15's SQLite journal) and one whose
sections do not. The journal's bar: storm p99 with the journal at most 1.05x without.
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack

from .stats import median, percentile, thin
from .suite import Row, Suite, SuiteContext, SuiteResult, bar
from .turn_rig import TOPIC, Config, Deployment

BAR = 1.2
RUNS = 3
"""Runs per suite (fresh deployments each; quick: 1): the bar is the median of their ratios."""
JOURNAL_BAR = 1.05
"""Issue 15: journaling every section state may cost the storm's p99 at most 5 %."""
PAUSE_MS = 20
COMPACTION_MODEL = (0.2, 20.0)
BUDGET = 800
"""Section budget (dialogue and topic): a compaction is due past 400 uncompacted bytes,
about five sensor updates; a summary is limited to 200 bytes."""
INPUT_BUDGET = 4_000
"""One job takes up to ~40 updates, so a participant's one job at a time keeps up with
its share of the sensor's rate instead of piling up a backlog."""


def config(participants: int, journal: str | None = None) -> Config:
    return Config(
        plan={
            "incremental_context_topics": [TOPIC],
            "dialogue_budget_bytes": BUDGET,
            "topic_budget_bytes": BUDGET,
            "compaction_input_budget_bytes": INPUT_BUDGET,
            "compaction_workers": 2,
            "worker_concurrency": participants,
        },
        compaction_model=COMPACTION_MODEL,
        journal=journal,
    )


MODES = ("journal off", "journal on")
"""The two deployments, alive together and measured in turn within each repetition."""


class _Figures:
    """What the runs measured, pooled over runs (rows) and per run (the bars)."""

    def __init__(self) -> None:
        self.p50: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.p99: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.samples: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.cpu: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        self.compactions: dict[str, list[float]] = defaultdict(list)
        self.compaction_rates: dict[str, list[float]] = defaultdict(list)
        self.rates: dict[str, list[float]] = defaultdict(list)
        self.failed = 0
        self.unsettled = 0
        self.workers: list[str] = []
        self.ratios: list[float] = []
        """Each run's storm p99 / idle p99 (journal off): the median of its paired ratios."""
        self.journal_ratios: list[float] = []


def _sizes(quick: bool) -> tuple[int, float, list[str], int]:
    """Participants, sensor updates/s, the participants measured, and turns per measured
    participant and phase (1,500 samples per phase: p99 is the 15th slowest)."""
    if quick:
        return 10, 200.0, ["p0", "p1"], 3
    return 50, 1_000.0, [f"p{i}" for i in range(5)], 300


def run(ctx: SuiteContext) -> SuiteResult:
    figures = _Figures()
    runs = 1 if ctx.quick else RUNS
    for number in range(1, runs + 1):
        ctx.progress(f"storm: run {number}/{runs}")
        _run_once(ctx, figures)
        ctx.progress(
            f"storm: run {number}/{runs} storm p99 / idle p99 {figures.ratios[-1]:.2f}, "
            f"journal on / off {figures.journal_ratios[-1]:.2f}"
        )
    return _result(figures, ctx.quick)


def _run_once(ctx: SuiteContext, figures: _Figures) -> None:
    """One run: two fresh deployments, filled, then ``ctx.repetitions`` paired repetitions."""
    participants, rate, measured, turns = _sizes(ctx.quick)
    phases = ("idle", "storm")
    f = figures
    p50, p99, samples, cpu = f.p50, f.p99, f.samples, f.cpu
    compactions, compaction_rates, rates = f.compactions, f.compaction_rates, f.rates
    first = len(p99[MODES[0], "idle"])  # this run's repetitions start here in each list
    with tempfile.TemporaryDirectory(prefix="xrmq-storm-") as directory, ExitStack() as stack:
        deployments = {
            mode: Deployment(config(participants, journal), sensor=True)
            for mode, journal in zip(MODES, (None, f"{directory}/context.sqlite3"))
        }
        for deployment in deployments.values():  # both start at once, then both get ready
            stack.push(deployment.__exit__)
            deployment.launch()
        for deployment in deployments.values():
            deployment.wait_ready()
        for mode, deployment in deployments.items():
            ctx.progress(
                f"storm ({mode}): {len(deployment.workers)} processes up; "
                f"{participants} participants, {rate:,.0f} updates/s, "
                f"{turns * len(measured)} turns per phase"
            )
            deployment.turns(2, measured, PAUSE_MS)  # warm-up
            if ctx.quick:
                continue  # CI size: the figures mean nothing, the fill only costs time
            # Fill every participant's context to its steady-state size first, so the idle
            # phase renders prompts as large as the storm phase does: the ratio then
            # measures the storm's activity, not the cost of a fuller prompt (the model
            # scans every context line: a profile of the conversation showed its work
            # doubling between an empty-context idle phase and the storm).
            before = deployment.compactions()["compactions"]
            deployment.storm(rate, participants)
            _until_compacting(deployment, before + participants // 2)
            deployment.calm()
        for rep in range(1, ctx.repetitions + 1):
            order = MODES if rep % 2 else tuple(reversed(MODES))  # neither mode always goes first
            for mode in order:
                deployment = deployments[mode]
                f.unsettled += not deployment.quiesce()
                for phase in phases:
                    if phase == "storm":
                        before = deployment.compactions()["compactions"]
                        deployment.storm(rate, participants)
                        _until_compacting(
                            deployment, before + (1 if ctx.quick else participants // 2)
                        )
                    cpu_before, clock = deployment.cpu_seconds(), time.monotonic()
                    result = deployment.turns(turns, measured, PAUSE_MS)
                    elapsed = time.monotonic() - clock
                    for name, seconds in deployment.cpu_seconds().items():
                        cpu[mode, phase, name].append(100 * (seconds - cpu_before[name]) / elapsed)
                    if phase == "storm":
                        done = deployment.compactions()["compactions"] - before
                        sensor = deployment.calm()
                        compactions[mode].append(done)
                        compaction_rates[mode].append(done / sensor["seconds"])
                        rates[mode].append(sensor["published"] / sensor["seconds"])
                    f.failed += result["failed"]
                    latencies = result["first_us"]
                    p50[mode, phase].append(percentile(latencies, 0.5))
                    p99[mode, phase].append(percentile(latencies, 0.99))
                    samples[mode, phase] += latencies
                ctx.progress(
                    f"storm ({mode}): rep {rep}/{ctx.repetitions} idle p99 "
                    f"{p99[mode, 'idle'][-1]:,.0f} us, storm p99 {p99[mode, 'storm'][-1]:,.0f} us; "
                    f"{compactions[mode][-1]} compactions"
                )
        f.workers = sorted(
            name
            for name in deployments[MODES[0]].workers
            if not name.startswith("raw") and name != "tap"
        )
    off, on = MODES
    ratio = [s / i for s, i in zip(p99[off, "storm"][first:], p99[off, "idle"][first:])]
    journal_ratio = [j / n for j, n in zip(p99[on, "storm"][first:], p99[off, "storm"][first:])]
    f.ratios.append(median(ratio))
    f.journal_ratios.append(median(journal_ratio))


def _result(f: _Figures, quick: bool) -> SuiteResult:
    participants, rate, measured, turns = _sizes(quick)
    p50, p99, samples, cpu = f.p50, f.p99, f.samples, f.cpu
    compactions, compaction_rates, rates = f.compactions, f.compaction_rates, f.rates
    workers, failed, unsettled = f.workers, f.failed, f.unsettled
    phases = ("idle", "storm")
    off = MODES[0]
    group = "turn to first chunk at the renderer, zero-delay model"
    rows = [
        Row(
            group=group,
            subject=phase if mode == off else f"{phase}, {mode}",
            unit="us",
            median=median(p50[mode, phase]),
            repetitions=p50[mode, phase],
            higher_is_better=False,
            samples=thin(samples[mode, phase]),
            extra={
                "p99 us": median(p99[mode, phase]),
                **(
                    {
                        "compactions per storm": median(compactions[mode]),
                        "compactions/s": median(compaction_rates[mode]),
                        "sensor updates/s": median(rates[mode]),
                    }
                    if phase == "storm"
                    else {}
                ),
                **{f"{name} cpu %": median(cpu[mode, phase, name]) for name in workers},
            },
        )
        for mode in MODES
        for phase in phases
    ]
    notes = [
        f"{participants} participants; the sensor publishes {rate:,.0f} incremental updates/s "
        "round-robin over all "
        f"of them; budgets {BUDGET} bytes, compaction input budget {INPUT_BUDGET}, 2 workers x "
        f"{participants} "
        f"concurrent jobs on OfflineLLM({COMPACTION_MODEL[0]:g} s to first token, "
        f"{COMPACTION_MODEL[1]:g} tokens/s)",
        f"turns: {len(measured)} of those participants at once, {turns} sequential zero-delay "
        "turns each per phase, "
        f"think time before each uniform in [0, {2 * PAUSE_MS}] ms; compactions counted from the "
        "storm's start "
        "(first wave awaited before the turns) to its end",
        "two deployments alive together, the sections of one journaling every state change "
        "to SQLite (WAL, batched per event-loop turn) and of the other not; each repetition "
        "measures both in turn, alternating which goes first; the journal bar is the median "
        "of the paired per-repetition storm p99 ratios",
        "median column: p50 per repetition, median over repetitions; cpu %: share of one core per "
        "process "
        "during the phase's turns (two cores: 200 % in all)",
    ]
    if failed:
        notes.append(
            f"{failed} turns failed (no completed reply within the timeout) and are not in the "
            "figures"
        )
    if unsettled:
        notes.append(
            f"{unsettled} idle phases started with compaction jobs still queued or running"
        )
    runs = ", ".join(f"{value:.2f}" for value in f.ratios)
    journal_runs = ", ".join(f"{value:.2f}" for value in f.journal_ratios)
    notes.append(
        f"{len(f.ratios)} run(s), fresh deployments each; storm p99 / idle p99 per run: {runs}; "
        f"journal on / off per run: {journal_runs}; the rows pool every run's repetitions"
    )
    bars = [
        bar(
            "storm p99 / idle p99",
            median(f.ratios),
            "<=",
            BAR,
            f"journal off; median of {len(f.ratios)} runs, each the median of its paired "
            "per-repetition ratios",
        ),
        bar(
            "storm p99 journal on / off",
            median(f.journal_ratios),
            "<=",
            JOURNAL_BAR,
            f"median of {len(f.ratios)} runs of paired per-repetition ratios",
        ),
    ]
    return SuiteResult(rows=rows, bars=bars, notes=notes)


def _until_compacting(deployment: Deployment, target: int, timeout_s: float = 15.0) -> None:
    """Wait until ``target`` compactions completed in all: the storm is in full swing."""
    deadline = time.monotonic() + timeout_s
    while deployment.compactions()["compactions"] < target and time.monotonic() < deadline:
        time.sleep(0.1)


SUITE = Suite("storm", "Storm: turn to first chunk during a compaction storm vs idle", run)
