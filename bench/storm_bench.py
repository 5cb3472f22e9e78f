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
most 1.25x idle p99, as the median of the paired per-repetition ratios. Compactions
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

BAR = 1.25
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


def run(ctx: SuiteContext) -> SuiteResult:
    participants = 10 if ctx.quick else 50
    rate = 200.0 if ctx.quick else 1_000.0
    measured = [f"p{i}" for i in range(2 if ctx.quick else 5)]
    # per measured participant and phase: 1,500 samples, p99 = 15th slowest
    turns = 3 if ctx.quick else 300
    phases = ("idle", "storm")
    p50: dict[tuple[str, str], list[float]] = defaultdict(list)
    p99: dict[tuple[str, str], list[float]] = defaultdict(list)
    samples: dict[tuple[str, str], list[float]] = defaultdict(list)
    cpu: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    compactions: dict[str, list[float]] = defaultdict(list)
    compaction_rates: dict[str, list[float]] = defaultdict(list)
    rates: dict[str, list[float]] = defaultdict(list)
    failed, unsettled = 0, 0
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
                unsettled += not deployment.quiesce()
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
                    failed += result["failed"]
                    latencies = result["first_us"]
                    p50[mode, phase].append(percentile(latencies, 0.5))
                    p99[mode, phase].append(percentile(latencies, 0.99))
                    samples[mode, phase] += latencies
                ctx.progress(
                    f"storm ({mode}): rep {rep}/{ctx.repetitions} idle p99 "
                    f"{p99[mode, 'idle'][-1]:,.0f} us, storm p99 {p99[mode, 'storm'][-1]:,.0f} us; "
                    f"{compactions[mode][-1]} compactions"
                )
        workers = sorted(
            name for name in deployments[MODES[0]].workers if not name.startswith("raw")
        )
    off, on = MODES
    ratio = [s / i for s, i in zip(p99[off, "storm"], p99[off, "idle"])]
    journal_ratio = [j / n for j, n in zip(p99[on, "storm"], p99[off, "storm"])]
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
    bars = [
        bar("storm p99 / idle p99", median(ratio), "<=", BAR, "journal off, paired per repetition"),
        bar(
            "storm p99 journal on / off",
            median(journal_ratio),
            "<=",
            JOURNAL_BAR,
            "paired per repetition",
        ),
    ]
    return SuiteResult(rows=rows, bars=bars, notes=notes)


def _until_compacting(deployment: Deployment, target: int, timeout_s: float = 15.0) -> None:
    """Wait until ``target`` compactions completed in all: the storm is in full swing."""
    deadline = time.monotonic() + timeout_s
    while deployment.compactions()["compactions"] < target and time.monotonic() < deadline:
        time.sleep(0.1)


SUITE = Suite("storm", "Storm: turn to first chunk during a compaction storm vs idle", run)
