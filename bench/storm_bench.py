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
"""

from __future__ import annotations

import time
from collections import defaultdict

from .stats import median, percentile, thin
from .suite import Row, Suite, SuiteContext, SuiteResult, bar
from .turn_rig import TOPIC, Config, Deployment

BAR = 1.25
PAUSE_MS = 20
COMPACTION_MODEL = (0.2, 20.0)
BUDGET = 800
"""Section budget (dialogue and topic): a compaction is due past 400 uncompacted bytes,
about five sensor updates; a summary is limited to 200 bytes."""
INPUT_BUDGET = 4_000
"""One job takes up to ~40 updates, so a participant's one job at a time keeps up with
its share of the sensor's rate instead of piling up a backlog."""


def config(participants: int) -> Config:
    return Config(
        plan={"incremental_context_topics": [TOPIC], "dialogue_budget_bytes": BUDGET, "topic_budget_bytes": BUDGET,
              "compaction_input_budget_bytes": INPUT_BUDGET, "compaction_workers": 2,
              "worker_concurrency": participants},
        compaction_model=COMPACTION_MODEL,
    )


def run(ctx: SuiteContext) -> SuiteResult:
    participants = 10 if ctx.quick else 50
    rate = 200.0 if ctx.quick else 1_000.0
    measured = [f"p{i}" for i in range(2 if ctx.quick else 5)]
    turns = 3 if ctx.quick else 300  # per measured participant and phase: 1,500 samples, p99 = 15th slowest
    phases = ("idle", "storm")
    p50: dict[str, list[float]] = defaultdict(list)
    p99: dict[str, list[float]] = defaultdict(list)
    samples: dict[str, list[float]] = defaultdict(list)
    cpu: dict[tuple[str, str], list[float]] = defaultdict(list)
    compactions, compaction_rates, rates, failed, unsettled = [], [], [], 0, 0
    with Deployment(config(participants), sensor=True) as deployment:
        ctx.progress(f"storm: {len(deployment.workers)} processes up; {participants} participants, "
                     f"{rate:,.0f} updates/s, {turns * len(measured)} turns per phase")
        deployment.turns(2, measured, PAUSE_MS)  # warm-up
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
            unsettled += not deployment.quiesce()
            results = {}
            for phase in phases:
                if phase == "storm":
                    before = deployment.compactions()["compactions"]
                    deployment.storm(rate, participants)
                    _until_compacting(deployment, before + participants // 2)
                cpu_before, clock = deployment.cpu_seconds(), time.monotonic()
                results[phase] = deployment.turns(turns, measured, PAUSE_MS)
                elapsed = time.monotonic() - clock
                for name, seconds in deployment.cpu_seconds().items():
                    cpu[phase, name].append(100 * (seconds - cpu_before[name]) / elapsed)
                if phase == "storm":
                    done = deployment.compactions()["compactions"] - before
                    sensor = deployment.calm()
                    compactions.append(done)
                    compaction_rates.append(done / sensor["seconds"])
                    rates.append(sensor["published"] / sensor["seconds"])
                failed += results[phase]["failed"]
                latencies = results[phase]["first_us"]
                p50[phase].append(percentile(latencies, 0.5))
                p99[phase].append(percentile(latencies, 0.99))
                samples[phase] += latencies
            ctx.progress(f"storm: rep {rep}/{ctx.repetitions} idle p99 {p99['idle'][-1]:,.0f} us, storm p99 "
                         f"{p99['storm'][-1]:,.0f} us; {compactions[-1]} compactions in the storm phase")
    ratio = [s / i for s, i in zip(p99["storm"], p99["idle"])]
    group = "turn to first chunk at the renderer, zero-delay model"
    rows = [
        Row(group=group, subject=f"{phase}", unit="us", median=median(p50[phase]), repetitions=p50[phase],
            higher_is_better=False, samples=thin(samples[phase]),
            extra={"p99 us": median(p99[phase]),
                   **({"compactions per storm": median(compactions), "compactions/s": median(compaction_rates),
                       "sensor updates/s": median(rates)}
                      if phase == "storm" else {}),
                   **{f"{name} cpu %": median(cpu[phase, name]) for name in sorted(deployment.workers)
                      if not name.startswith("raw")}})
        for phase in phases
    ]
    notes = [
        f"{participants} participants; the sensor publishes {rate:,.0f} incremental updates/s round-robin over all "
        f"of them; budgets {BUDGET} bytes, compaction input budget {INPUT_BUDGET}, 2 workers x {participants} "
        f"concurrent jobs on OfflineLLM({COMPACTION_MODEL[0]:g} s to first token, {COMPACTION_MODEL[1]:g} tokens/s)",
        f"turns: {len(measured)} of those participants at once, {turns} sequential zero-delay turns each per phase, "
        f"think time before each uniform in [0, {2 * PAUSE_MS}] ms; compactions counted from the storm's start "
        "(first wave awaited before the turns) to its end",
        "median column: p50 per repetition, median over repetitions; cpu %: share of one core per process "
        "during the phase's turns (two cores: 200 % in all)",
    ]
    if failed:
        notes.append(f"{failed} turns failed (no completed reply within the timeout) and are not in the figures")
    if unsettled:
        notes.append(f"{unsettled} idle phases started with compaction jobs still queued or running")
    bars = [bar("storm p99 / idle p99", median(ratio), "<=", BAR, "paired per repetition")]
    return SuiteResult(rows=rows, bars=bars, notes=notes)


def _until_compacting(deployment: Deployment, target: int, timeout_s: float = 15.0) -> None:
    """Wait until ``target`` compactions completed in all: the storm is in full swing."""
    deadline = time.monotonic() + timeout_s
    while deployment.compactions()["compactions"] < target and time.monotonic() < deadline:
        time.sleep(0.1)


SUITE = Suite("storm", "Storm: turn to first chunk during a compaction storm vs idle", run)
