"""PNG plots of a run: figure bars per group, latency distributions, series curves.

matplotlib is imported here only, lazily: it is in the ``bench`` extra, not a runtime
dependency, and the suites run without it (``plot`` then says what to install).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from .report import Results


class PlottingUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlottingUnavailable(
            "matplotlib is not installed: pip install -e '.[bench]' to get plots"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def plot(results: Results, out_dir: Path) -> list[Path]:
    """Write the plots of every suite that has something to draw; return their paths."""
    pyplot = _pyplot()
    written = []
    for record in results.suites:
        if record.result is None:
            continue
        groups = defaultdict(list)
        for row in record.result.rows:
            groups[row.group].append(row)
        if groups:
            written.append(_figures(pyplot, record.name, groups, out_dir))
        distributions = {
            group: [row for row in rows if row.samples] for group, rows in groups.items()
        }
        distributions = {group: rows for group, rows in distributions.items() if rows}
        if distributions:
            written.append(_distributions(pyplot, record.name, distributions, out_dir))
        if record.result.series:
            written.append(_series(pyplot, record.name, record.result.series, out_dir))
    return written


def _grid(pyplot, panels: int, height: float = 2.6):
    columns = min(panels, 2)
    rows = (panels + columns - 1) // columns
    figure, axes = pyplot.subplots(
        rows, columns, figsize=(6.5 * columns, height * rows), squeeze=False
    )
    for extra in axes.flat[panels:]:
        extra.set_visible(False)
    return figure, list(axes.flat)


def _save(pyplot, figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return path


def _figures(pyplot, suite: str, groups: dict, out_dir: Path) -> Path:
    """Horizontal bars, one panel per group, with the per-repetition spread as error bars."""
    figure, axes = _grid(
        pyplot, len(groups), height=0.5 + 0.45 * max(len(rows) for rows in groups.values()) + 1
    )
    for axis, (group, rows) in zip(axes, groups.items()):
        medians = [row.median for row in rows]
        low = [row.median - min(row.repetitions) for row in rows]
        high = [max(row.repetitions) - row.median for row in rows]
        axis.barh(
            [row.subject for row in rows], medians, xerr=[low, high], color="#4a7ab5", capsize=3
        )
        axis.invert_yaxis()
        better = "higher" if rows[0].higher_is_better else "lower"
        axis.set_title(f"{group} ({better} is better)", fontsize=9)
        axis.set_xlabel(rows[0].unit)
        axis.tick_params(labelsize=8)
    return _save(pyplot, figure, out_dir / f"{suite}-figures.png")


def _distributions(pyplot, suite: str, groups: dict, out_dir: Path) -> Path:
    """Empirical CDFs of the latency samples, one panel per group, log time axis."""
    figure, axes = _grid(pyplot, len(groups), height=3.2)
    for axis, (group, rows) in zip(axes, groups.items()):
        for row in rows:
            count = len(row.samples)
            axis.step(
                row.samples,
                [(i + 1) / count for i in range(count)],
                where="post",
                label=row.subject,
            )
        axis.set_xscale("log")
        axis.set_title(group, fontsize=9)
        axis.set_xlabel(rows[0].unit)
        axis.set_ylabel("fraction")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    return _save(pyplot, figure, out_dir / f"{suite}-distributions.png")


def _series(pyplot, suite: str, series: list, out_dir: Path) -> Path:
    figure, axes = _grid(pyplot, len(series), height=3.2)
    for axis, curve in zip(axes, series):
        axis.plot(curve.x, curve.y)
        axis.set_title(curve.name, fontsize=9)
        axis.set_xlabel(curve.x_label)
        axis.set_ylabel(curve.y_label)
        axis.grid(alpha=0.3)
    return _save(pyplot, figure, out_dir / f"{suite}-series.png")
