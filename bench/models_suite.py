"""Models suite: ``bench.models_bench`` (time to first chunk of the model layer, OfflineLLM's
CPU per turn) in the runner.

The module stays a standalone script (``python -m bench.models_bench``); this adapter
runs its ``main`` and turns its rows into ``Row``s. Each path is one row of its own
group (the paths are layers of one stack, not rivals); p50 is the figure, p99 an extra.
"""

from __future__ import annotations

import asyncio

from .suite import Row, Suite, SuiteContext, SuiteResult


def run(ctx: SuiteContext) -> SuiteResult:
    from . import models_bench

    iterations = 30 if ctx.quick else 300
    rows = []
    for rep in range(ctx.repetitions):
        ctx.progress(f"models: repetition {rep + 1}/{ctx.repetitions}, {iterations} calls per path")
        rows.append(asyncio.run(models_bench.main(iterations)))
    result = []
    for index, first in enumerate(rows[0]):
        p50s = [rep[index]["p50_ms"] for rep in rows]
        p99s = sorted(rep[index]["p99_ms"] for rep in rows)
        result.append(
            Row(
                group="time to first chunk p50",
                subject=first["name"],
                unit="ms",
                median=sorted(p50s)[len(p50s) // 2],
                repetitions=p50s,
                higher_is_better=False,
                extra={"p99 ms": p99s[len(p99s) // 2], "n": first["n"]},
            )
        )
    cpu = models_bench.offline_turn_cpu(turns=30 if ctx.quick else 300, rounds=ctx.repetitions)
    medians = {name: sorted(values)[len(values) // 2] for name, values in cpu.items()}
    for name, subject in (("reference", "uncached reference"), ("cached", "OfflineLLM")):
        result.append(
            Row(
                group="OfflineLLM respond + usage CPU per turn",
                subject=subject,
                unit="µs",
                median=medians[name],
                repetitions=cpu[name],
                higher_is_better=False,
                extra={"reference / this": medians["reference"] / medians[name]},
            )
        )
    return SuiteResult(
        rows=result,
        notes=[
            "OfflineLLM (defaults) runs 10 calls per repetition whatever the size.",
            "CPU per turn: turn-suite-like requests (bench.offline_reference), the per-line"
            " caches cold at the start of each repetition.",
        ],
    )


SUITE = Suite(
    "models", "Models: time to first chunk of litellm, LiteLLMService and OfflineLLM", run
)
