"""The suite interface: what a benchmark module provides and what it returns.

A suite is a module ``bench/<name>_bench.py`` (or ``bench/<name>_suite.py``) with a
module-level ``SUITE = Suite(name, title, run)``. The runner finds it by importing the
modules of the ``bench`` package whose names end that way (``registry.discover``); no
other file has to change to add one. ``run(ctx)`` measures, calling ``ctx.progress``
as it goes, and returns a ``SuiteResult``: rows (one figure per subject), bars
(pass/fail against the design's limits), series (for line plots) and notes. The runner
adds timing, the table, ``results.json`` and the plots.

Rules a suite follows (docs/design.md, "Bars"): every ratio is measured side by side in one
run; every figure is the median of ``ctx.repetitions`` repetitions; ``ctx.quick``
shrinks the work to seconds for CI and asserts nothing about speed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec


class Row(msgspec.Struct, kw_only=True):
    """One figure of one subject (xrmq, raw pyzmq, a peer...) in one comparison group."""

    group: str
    """What is compared, e.g. "one-way throughput, cross-process"; the plots group by it."""
    subject: str
    unit: str
    median: float
    """The figure: median over the repetitions."""
    repetitions: list[float]
    """The figure of each repetition, in run order."""
    higher_is_better: bool
    extra: dict[str, float] = {}
    """Secondary figures (p99, loss, ratio to the baseline...), each a median too."""
    samples: list[float] = []
    """Raw samples (latencies) for distribution plots; at most a few thousand."""


class Bar(msgspec.Struct, kw_only=True):
    """A design bar: ``measured <op> limit``."""

    name: str
    measured: float
    limit: float
    op: str
    """">=" or "<=" ."""
    met: bool
    detail: str = ""


class Series(msgspec.Struct, kw_only=True):
    """A curve (e.g. memory over session length) for a line plot."""

    name: str
    x_label: str
    y_label: str
    x: list[float]
    y: list[float]


class SuiteResult(msgspec.Struct, kw_only=True):
    rows: list[Row] = []
    bars: list[Bar] = []
    series: list[Series] = []
    notes: list[str] = []
    """Skipped parts, losses, placement effects: anything a reader of the table needs."""


def bar(name: str, measured: float, op: str, limit: float, detail: str = "") -> Bar:
    """A ``Bar`` with ``met`` computed from ``op``."""
    if op not in (">=", "<="):
        raise ValueError(f"bar: op must be '>=' or '<=', got {op!r}")
    met = measured >= limit if op == ">=" else measured <= limit
    return Bar(name=name, measured=measured, limit=limit, op=op, met=met, detail=detail)


@dataclass(frozen=True)
class SuiteContext:
    """What the runner gives a suite."""

    quick: bool
    repetitions: int
    out_dir: Path
    trials: int | None = None
    """``--trials``: a suite's trial count instead of its full size (a loaded box)."""

    def progress(self, message: str) -> None:
        """One progress line on stderr (stdout is left to the table)."""
        print(f"  {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Suite:
    name: str
    title: str
    run: Callable[[SuiteContext], SuiteResult]
