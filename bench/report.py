"""The table printed after a run, and ``results.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from .suite import SuiteResult


class SuiteRecord(msgspec.Struct, kw_only=True):
    """One suite's outcome in ``results.json``: ``status`` is ok or failed."""

    name: str
    title: str
    status: str
    seconds: float
    result: SuiteResult | None = None
    error: str | None = None


class Results(msgspec.Struct, kw_only=True):
    """The whole of ``results.json``."""

    started: str
    quick: bool
    repetitions: int
    commit: str
    machine: dict[str, Any]
    versions: dict[str, str]
    suites: list[SuiteRecord]


def write(results: Results, out_dir: Path) -> Path:
    path = out_dir / "results.json"
    path.write_bytes(msgspec.json.format(msgspec.json.encode(results), indent=2) + b"\n")
    return path


def _figure(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def table(results: Results) -> str:
    """Markdown: one table of figures per suite, then its bars and notes."""
    lines = [
        f"commit {results.commit}; {results.machine['cpu']}, {results.machine['cpus_usable']} "
        "CPUs; "
        f"python {results.versions['python']}; {'quick' if results.quick else 'full'} run, "
        f"median of {results.repetitions} repetitions",
        "",
    ]
    for record in results.suites:
        lines.append(f"### {record.name}: {record.title} ({record.status}, {record.seconds:.1f} s)")
        if record.error:
            lines += ["", "```", record.error.strip(), "```", ""]
            continue
        result = record.result
        assert result is not None  # a suite without an error has its result
        if result.rows:
            lines += ["", "| group | subject | median | unit | details |", "|---|---|---|---|---|"]
            for row in result.rows:
                details = ", ".join(f"{key} {_figure(value)}" for key, value in row.extra.items())
                lines.append(
                    f"| {row.group} | {row.subject} | {_figure(row.median)} | {row.unit} | "
                    f"{details} |"
                )
        if result.bars:
            lines += ["", "| bar | measured | limit | met |", "|---|---|---|---|"]
            for item in result.bars:
                detail = f" ({item.detail})" if item.detail else ""
                lines.append(
                    f"| {item.name}{detail} | {item.measured:.2f} | {item.op} {item.limit:g} | "
                    f"{'yes' if item.met else '**no**'} |"
                )
        lines += [""] + [f"- {note}" for note in result.notes]
        lines.append("")
    return "\n".join(lines)
