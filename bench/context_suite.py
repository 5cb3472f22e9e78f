"""Context suite: ``bench.context_bench`` (blocks(), memory, topic-actor throughput) in the runner.

The module stays a standalone script (``python -m bench.context_bench``); this adapter
runs its measurements and turns them into rows, a memory-over-session series and the
design's "flat over a long session" bar: past the first samples, memory may grow only
by the exchange identities kept for the session (docs/context.md), bounded here at 300 bytes
per exchange.
"""

from __future__ import annotations

import asyncio
import tempfile

from .suite import Row, Series, Suite, SuiteContext, SuiteResult, bar

IDENTITY_BYTES_LIMIT = 300.0
RECOVERY_LIMIT_S = 1.0
"""Issue 15: a context process with 50 participants at full budgets is ready within 1 s."""


def _row(
    group: str,
    subject: str,
    unit: str,
    values: list[float],
    *,
    higher: bool = False,
    **extra: float,
) -> Row:
    ordered = sorted(values)
    return Row(
        group=group,
        subject=subject,
        unit=unit,
        median=ordered[len(ordered) // 2],
        repetitions=values,
        higher_is_better=higher,
        extra=extra,
    )


def run(ctx: SuiteContext) -> SuiteResult:
    from . import context_bench

    blocks_runs, memory_runs, throughput_runs = [], [], []
    for rep in range(ctx.repetitions):
        ctx.progress(
            f"context: repetition {rep + 1}/{ctx.repetitions}: blocks(), memory at full budgets, "
            "throughput"
        )
        blocks_runs.append(asyncio.run(context_bench.bench_blocks(1_000 if ctx.quick else 20_000)))
        memory_runs.append(asyncio.run(context_bench.bench_memory_full(10 if ctx.quick else 200)))
        throughput_runs.append(
            asyncio.run(context_bench.bench_throughput(1_000 if ctx.quick else 50_000, 10))
        )
    exchanges = 400 if ctx.quick else 10_000
    ctx.progress(f"context: one {exchanges:,}-exchange session")
    session = asyncio.run(context_bench.bench_long_session(exchanges, exchanges // 10))
    journal_runs, recovery_runs = [], []
    recovering = 10 if ctx.quick else 50
    with tempfile.TemporaryDirectory(prefix="xrmq-journal-") as directory:
        for rep in range(ctx.repetitions):
            ctx.progress(
                f"context: repetition {rep + 1}/{ctx.repetitions}: journal at full budgets, "
                "recovery"
            )
            journal_runs.append(
                asyncio.run(
                    context_bench.bench_journal_full(10 if ctx.quick else 50, f"{directory}")
                )
            )
            recovery_runs.append(asyncio.run(context_bench.bench_recovery(recovering, directory)))
        ctx.progress(
            f"context: one {200 if ctx.quick else exchanges:,}-exchange session, journaled"
        )
        journaled = 200 if ctx.quick else exchanges
        journal_session = asyncio.run(
            context_bench.bench_journal_session(journaled, journaled // 10, directory)
        )

    first = blocks_runs[0]
    rows = [
        _row(
            "blocks() at full budgets",
            "replica in sync",
            "us",
            [run["synced"][0] for run in blocks_runs],
            **{
                "p99 us": blocks_runs[0]["synced"][1],
                "blocks": first["blocks"],
                "bytes": first["rendered_bytes"],
            },
        ),
        _row(
            "blocks() at full budgets",
            "one exchange not yet acknowledged",
            "us",
            [run["overlay"][0] for run in blocks_runs],
            **{"p99 us": blocks_runs[0]["overlay"][1]},
        ),
        _row(
            "memory per participant",
            "at full budgets",
            "KiB",
            [value / 1024 for value in memory_runs],
        ),
        _row(
            "topic actor",
            "updates from a sensor process",
            "updates/s",
            [run["per_second"] for run in throughput_runs],
            higher=True,
            gaps=max(run["gaps"] for run in throughput_runs),
            overflow=max(run["overflow"] for run in throughput_runs),
        ),
    ]
    (start_x, start_bytes, _), (end_x, end_bytes, end_ids) = session[1], session[-1]
    per_exchange = (end_bytes - start_bytes) / (end_x - start_x)
    rows.append(
        _row(
            "memory over a session",
            f"growth per exchange after {start_x:,}",
            "B",
            [per_exchange],
            **{"identities": end_ids, "KiB at end": end_bytes / 1024},  # type: ignore[arg-type]
        )
    )
    rows.append(
        _row(
            "journal per participant",
            "at full budgets",
            "KiB",
            [value / 1024 for value in journal_runs],
        )
    )
    (j_start_x, j_start), (j_end_x, j_end) = journal_session[1], journal_session[-1]
    journal_per_exchange = (j_end - j_start) / (j_end_x - j_start_x)
    rows.append(
        _row(
            "journal over a session",
            f"growth per exchange after {j_start_x:,}",
            "B",
            [journal_per_exchange],
            **{"KiB at end": j_end / 1024},  # type: ignore[arg-type]  # never "higher"
        )
    )

    def mid(key: str) -> float:
        return sorted(run[key] for run in recovery_runs)[len(recovery_runs) // 2] * 1000

    recovery = [run["open_to_ready_s"] * 1000 for run in recovery_runs]
    rows.append(
        _row(
            "recovery of a context process",
            f"{recovering} participants at full budgets, open journal to ready",
            "ms",
            recovery,
            **{
                "spawn to ready ms": mid("spawn_to_ready_s"),
                "empty journal: open to ready ms": mid("empty_open_to_ready_s"),
                "empty journal: spawn to ready ms": mid("empty_spawn_to_ready_s"),
                "journal KiB": recovery_runs[0]["journal_bytes"] / 1024,
            },
        )
    )
    return SuiteResult(
        rows=rows,
        bars=[
            bar(
                "session memory growth per exchange (exchange identities only) (B)",
                per_exchange,
                "<=",
                IDENTITY_BYTES_LIMIT,
            ),
            bar(
                "session journal growth per exchange (exchange identities only) (B)",
                journal_per_exchange,
                "<=",
                IDENTITY_BYTES_LIMIT,
            ),
            bar(
                f"recovery, {recovering} participants at full budgets, open journal to ready (s)",
                sorted(recovery)[len(recovery) // 2] / 1000,
                "<=",
                RECOVERY_LIMIT_S,
            ),
        ],
        series=[
            Series(
                name="one participant's context memory",
                x_label="exchanges",
                y_label="KiB traced",
                x=[float(x) for x, _, _ in session],
                y=[traced / 1024 for _, traced, _ in session],
            ),
            Series(
                name="one participant's journal",
                x_label="exchanges",
                y_label="KiB on disk",
                x=[float(x) for x, _ in journal_session],
                y=[size / 1024 for _, size in journal_session],
            ),
        ],
        notes=[
            "blocks(): default budgets (dialogue 8,000 B, two topics of 4,000 B), every section "
            "over its budget.",
            "memory: tracemalloc over sections, replica and bus buffers; the session compacts with "
            "OfflineLLM "
            "(zero delays) and keeps every exchange identity, as docs/context.md requires.",
            "journal: the SQLite file after a checkpoint (WAL moved in); recovery: a fresh "
            "process opens the journal, restores every section, spawns the dialogue actors and "
            "starts its runtime (embedded broker); the bar is on that work; spawn to ready adds "
            "the interpreter's start and imports, shown beside the same process on an empty "
            "journal.",
        ],
    )


SUITE = Suite("context", "Context: blocks(), memory per participant, topic-actor throughput", run)
