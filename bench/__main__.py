"""``python -m bench [SUITE ...] [--quick] [--out DIR] [--repetitions N] [--list]``.

Runs the named suites (default: all discovered), prints progress on stderr and the
table on stdout, and writes ``results.json`` and PNG plots to DIR. A suite that fails
is recorded as failed with its traceback and the others still run; the exit status is
1 if any suite failed, 2 (before anything runs) for a suite name that does not exist.
Bars never change the exit status: a missed bar is a figure to read, not a broken
benchmark.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

from . import machine, plots, report
from .procs import ROOT
from .registry import discover
from .suite import SuiteContext


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*", metavar="SUITE", help="suites to run (default: all)")
    parser.add_argument(
        "--quick", action="store_true", help="CI size: seconds per suite, figures meaningless"
    )
    parser.add_argument("--out", type=Path, default=Path("bench-results"), help="output directory")
    parser.add_argument(
        "--repetitions", type=int, help="repetitions per figure (default: 5, quick: 1)"
    )
    parser.add_argument(
        "--trials", type=int, help="trials per figure, for suites that count trials (rollover)"
    )
    parser.add_argument("--list", action="store_true", help="list the suites and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["eval"]:  # the compaction-quality eval has options of its own
        from xrmq.actors.eval.eval_cli import main as eval_main

        return eval_main(argv[1:])
    args = parse_args(argv)
    # Quiet by default, here and in the processes the suites start; importing a suite
    # module never changes the environment (the test suite imports them all).
    os.environ.setdefault("XRMQ_LOG_LEVEL", "ERROR")
    suites, import_errors = discover()
    for module, error in import_errors.items():
        print(f"bench: cannot load {module}:\n{error}", file=sys.stderr)
    if args.list:
        for name, suite in suites.items():
            print(f"{name:10} {suite.title}")
        return 0
    wanted = args.suites or list(suites)
    unknown = [name for name in wanted if name not in suites]
    if unknown:
        print(
            f"python -m bench: no suite {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(suites)})",
            file=sys.stderr,
        )
        return 2
    repetitions = args.repetitions or (1 if args.quick else 5)
    args.out.mkdir(parents=True, exist_ok=True)
    ctx = SuiteContext(
        quick=args.quick, repetitions=repetitions, out_dir=args.out, trials=args.trials
    )
    records = []
    for name in wanted:
        suite = suites[name]
        print(f"[{name}] {suite.title}", file=sys.stderr, flush=True)
        began = time.perf_counter()
        try:
            result = suite.run(ctx)
        except Exception:
            records.append(
                report.SuiteRecord(
                    name=name,
                    title=suite.title,
                    status="failed",
                    seconds=time.perf_counter() - began,
                    error=traceback.format_exc(),
                )
            )
            print(f"[{name}] failed:\n{records[-1].error}", file=sys.stderr)
            continue
        seconds = time.perf_counter() - began
        records.append(
            report.SuiteRecord(
                name=name, title=suite.title, status="ok", seconds=seconds, result=result
            )
        )
        print(f"[{name}] done in {seconds:.1f} s", file=sys.stderr, flush=True)
    results = report.Results(
        started=datetime.now(UTC).isoformat(timespec="seconds"),
        quick=args.quick,
        repetitions=repetitions,
        commit=machine.git_commit(ROOT),
        machine=machine.machine(),
        versions=machine.versions(),
        suites=records,
    )
    print(report.table(results))
    print(f"bench: wrote {report.write(results, args.out)}", file=sys.stderr)
    try:
        for path in plots.plot(results, args.out):
            print(f"bench: wrote {path}", file=sys.stderr)
    except plots.PlottingUnavailable as reason:
        print(f"bench: no plots: {reason}", file=sys.stderr)
    return 0 if all(record.status == "ok" for record in records) else 1


if __name__ == "__main__":
    sys.exit(main())
