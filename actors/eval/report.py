"""The eval's report: figures aggregated from probe results, as a table, JSON and plots.

Recall is the share of probes answered with the current value and no stale value
stated as current (``Score.correct``). Each figure is given twice: for the answer the
answers model gave, and for the rendered context itself (what compaction kept,
whatever a model makes of it), so a low answer figure can be told apart from a lossy
summary.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import msgspec

from xrmq.actors.models.recording import CallRecord
from xrmq.schemas import CompactionPrompts

from .eval_session import FACT_KINDS
from .runner import ProbeResult, RunResult, SectionStats

DEPTH_BUCKETS: tuple[tuple[int, int, str], ...] = (
    (1, 1, "1"),
    (2, 2, "2"),
    (3, 4, "3-4"),
    (5, 8, "5-8"),
    (9, 16, "9-16"),
    (17, 10**9, "17+"),
)
"""Compaction depth (summary rewrites a fact went through) in ranges, for the plots."""


def depth_bucket(depth: int) -> str:
    for low, high, label in DEPTH_BUCKETS:
        if low <= depth <= high:
            return label
    raise ValueError(f"depth: must be >= 1, got {depth}")


class KindFigures(msgspec.Struct, kw_only=True):
    probes: int
    answer_recall: float
    context_recall: float
    stale_answers: int
    """Answers that stated a superseded value as current."""
    stale_contexts: int


class GuardFigures(msgspec.Struct, kw_only=True):
    """What the summary guards saw (``runner.SectionStats``), summed."""

    frozen: int = 0
    lossy: int = 0
    fallbacks: int = 0
    cut_off: int = 0
    frozen_accepted: int = 0
    lossy_accepted: int = 0
    """Frozen or lossy model summaries that replaced entries (0 with the guards on)."""


class SectionFigures(msgspec.Struct, kw_only=True):
    section: str
    budget_bytes: int
    limit_bytes: int
    compactions_min: int
    compactions_mean: float
    summary_bytes_max: int
    summary_bytes_mean: float
    clipped: int
    over_limit: int
    """Summaries larger than the limit (must be 0: the engine clips them)."""
    guards: GuardFigures


class VariantFigures(msgspec.Struct, kw_only=True):
    variant: str
    probes: int
    answer_recall: float
    context_recall: float
    by_kind: dict[str, KindFigures]
    oversized: KindFigures | None
    """Facts that opened an oversized exchange or update, whatever their kind."""
    by_depth: dict[str, dict[str, list[int]]]
    """kind -> depth bucket -> [correct answers, probes]."""
    sections: list[SectionFigures]
    skipped_facts: int
    guards: GuardFigures
    calls: dict[str, int]
    """Model calls by kind (``compact.<section>``, ``condense``, ``answer``)."""


def _share(values: list[bool]) -> float:
    return sum(values) / len(values) if values else 0.0


def _kind_figures(probes: list[ProbeResult]) -> KindFigures:
    return KindFigures(
        probes=len(probes),
        answer_recall=_share([p.answer_score.correct for p in probes]),
        context_recall=_share([p.context_score.correct for p in probes]),
        stale_answers=sum(p.answer_score.stale for p in probes),
        stale_contexts=sum(p.context_score.stale for p in probes),
    )


def _guard_figures(rows: list[SectionStats]) -> GuardFigures:
    fields = GuardFigures.__struct_fields__
    return GuardFigures(**{name: sum(getattr(row, name) for row in rows) for name in fields})


def figures(result: RunResult) -> VariantFigures:
    """Aggregate one variant's run."""
    by_kind: dict[str, list[ProbeResult]] = defaultdict(list)
    for probe in result.probes:
        by_kind[probe.kind].append(probe)
    kinds: dict[str, KindFigures] = {
        kind: _kind_figures(probes) for kind in FACT_KINDS if (probes := by_kind.get(kind))
    }
    oversized = [p for p in result.probes if p.oversized]
    depth: dict[str, dict[str, list[int]]] = {}
    for probe in result.probes:
        cell = depth.setdefault(probe.kind, {}).setdefault(depth_bucket(probe.depth), [0, 0])
        cell[0] += probe.answer_score.correct
        cell[1] += 1
    sections: list[SectionFigures] = []
    for name in dict.fromkeys(s.section for s in result.sections):
        rows = [s for s in result.sections if s.section == name]
        sizes = [size for s in rows for size in s.summary_bytes]
        sections.append(
            SectionFigures(
                section=name,
                budget_bytes=rows[0].budget_bytes,
                limit_bytes=rows[0].limit_bytes,
                compactions_min=min(s.compactions for s in rows),
                compactions_mean=sum(s.compactions for s in rows) / len(rows),
                summary_bytes_max=max(sizes, default=0),
                summary_bytes_mean=sum(sizes) / len(sizes) if sizes else 0.0,
                clipped=sum(s.statuses.get("clipped", 0) for s in rows),
                over_limit=sum(size > rows[0].limit_bytes for size in sizes),
                guards=_guard_figures(rows),
            )
        )
    return VariantFigures(
        variant=result.variant,
        probes=len(result.probes),
        answer_recall=_share([p.answer_score.correct for p in result.probes]),
        context_recall=_share([p.context_score.correct for p in result.probes]),
        by_kind=kinds,
        oversized=_kind_figures(oversized) if oversized else None,
        by_depth=depth,
        sections=sections,
        skipped_facts=len(result.skipped_facts),
        guards=_guard_figures(result.sections),
        calls=dict(result.calls),
    )


def table(all_figures: list[VariantFigures]) -> str:
    """The terminal report: recall per kind and variant, then the sections."""
    lines = [
        "| fact kind | "
        + " | ".join(f"{f.variant}: answer / context (stale)" for f in all_figures)
        + " |",
        "|---|" + "---|" * len(all_figures),
    ]
    for kind in (*FACT_KINDS, "oversized"):
        cells = []
        for f in all_figures:
            k = f.oversized if kind == "oversized" else f.by_kind.get(kind)
            cells.append(
                "-"
                if k is None
                else f"{k.answer_recall:.0%} / {k.context_recall:.0%} ({k.stale_answers}) "
                f"n={k.probes}"
            )
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines.append(
        "| **all** | "
        + " | ".join(
            f"**{f.answer_recall:.0%} / {f.context_recall:.0%}** n={f.probes}" for f in all_figures
        )
        + " |"
    )
    lines += [
        "",
        "| variant | section | budget | limit | compactions min/mean | summary max/mean bytes | "
        "clipped | frozen / lossy refused | fallbacks | cut off | frozen / lossy accepted |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in all_figures:
        for s in f.sections:
            g = s.guards
            lines.append(
                f"| {f.variant} | {s.section} | {s.budget_bytes} | {s.limit_bytes} | "
                f"{s.compactions_min}/{s.compactions_mean:.1f} | "
                f"{s.summary_bytes_max}/{s.summary_bytes_mean:.0f} | {s.clipped} | "
                f"{g.frozen} / {g.lossy} | {g.fallbacks} | {g.cut_off} | "
                f"{g.frozen_accepted} / {g.lossy_accepted} |"
            )
    lines += ["", "| variant | model calls by kind |", "|---|---|"]
    for f in all_figures:
        calls = ", ".join(f"{kind} {count}" for kind, count in f.calls.items())
        lines.append(f"| {f.variant} | {calls or '-'} |")
    return "\n".join(lines)


def call_kind(record: CallRecord, variants: list[CompactionPrompts]) -> str:
    """A logged call's kind: ``answer``, ``condense`` or ``compact.<section>`` (the eval's
    dialogue and its incremental ``notes`` topic), told by the request's system prompt."""
    if record.service != "compaction":
        return "answer"
    system = record.messages[0].content if record.messages else ""
    if any(system.startswith(prompts.condense) for prompts in variants):
        return "condense"
    if any(system.startswith(prompts.dialogue) for prompts in variants):
        return "compact.dialogue"
    return "compact.notes"


def latency(records: list[CallRecord], variants: list[CompactionPrompts]) -> dict[str, list[float]]:
    """Logged calls by kind: [calls, mean latency in seconds], every variant's together. A
    replay reports the logged model's latency, not its own."""
    seconds: dict[str, list[float]] = defaultdict(list)
    for record in records:
        seconds[call_kind(record, variants)].append(record.latency_s)
    return {kind: [len(v), sum(v) / len(v)] for kind, v in sorted(seconds.items())}


def latency_line(by_kind: dict[str, list[float]]) -> str:
    cells = [f"{kind} {int(calls)} x {mean:.2f} s" for kind, (calls, mean) in by_kind.items()]
    return "logged model calls by kind x mean latency: " + (", ".join(cells) or "none")


def write_plots(all_figures: list[VariantFigures], out_dir: Path) -> Path | None:
    """``eval-recall-by-depth.png``: answer recall against compaction depth, a line per
    fact kind, a panel per variant. ``None`` when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    labels = [label for _, _, label in DEPTH_BUCKETS]
    fig, axes = plt.subplots(1, len(all_figures), figsize=(6 * len(all_figures), 4), squeeze=False)
    for ax, f in zip(axes[0], all_figures, strict=True):
        for kind, cells in sorted(f.by_depth.items()):
            xs = [i for i, label in enumerate(labels) if label in cells]
            ys = [cells[labels[i]][0] / cells[labels[i]][1] for i in xs]
            ax.plot(xs, ys, marker="o", label=kind)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("summary rewrites the fact went through")
        ax.set_ylabel("answer recall")
        ax.set_title(f"prompts: {f.variant}")
        ax.legend(fontsize="small")
    path = out_dir / "eval-recall-by-depth.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def results_document(
    header: dict[str, Any], results: list[RunResult], all_figures: list[VariantFigures]
) -> dict[str, Any]:
    """``results.json``: the run's header (seed, models, prompts, versions), the figures
    and every probe."""
    return {
        **header,
        "figures": msgspec.to_builtins(all_figures),
        "runs": msgspec.to_builtins(results),
    }
