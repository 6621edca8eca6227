"""What the staleness study's table scripts share (stale_composition.py, stale_dose_response.py):
a run's figures over its steps, differences paired by seed, and docs/results.md's cells
(the switch step: rollverify/experiments/report.py; totals: RunRecord.total).

A benchmark script runs with benchmarks/ first on sys.path, so `import stale_tables` finds this.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable

from rollverify.experiments.power import mean_ci95, paired_difference
from rollverify.tracking.run_records import RunRecord

Figure = Callable[[RunRecord], float | None]


def mean_over_steps(run: RunRecord, metric: str, last_step: int | None = None) -> float | None:
    """The metric's mean over the run's logged steps (up to last_step); None if never logged."""
    values = [
        v for s, v in run.history.get(metric, {}).items() if last_step is None or s <= last_step
    ]
    return statistics.fmean(values) if values else None


def mean_and_ci(runs: Iterable[RunRecord], figure: Figure) -> tuple[float | None, float | None]:
    """Mean over runs of a figure, with its 95% half-width; runs without it left out."""
    return mean_ci95([v for v in (figure(r) for r in runs) if v is not None])


def paired_by_seed(
    runs: Iterable[RunRecord], base: dict[int, RunRecord], figure: Figure
) -> tuple[float | None, float | None, float | None]:
    """(mean, 95% half-width, smallest difference detectable at 80% power) of figure(run) -
    figure(base run of the same seed), over the runs whose seed has a base run and both values."""
    diffs = []
    for run in runs:
        twin = base.get(run.seed)
        if twin is None:
            continue
        mine, theirs = figure(run), figure(twin)
        if mine is not None and theirs is not None:
            diffs.append(mine - theirs)
    return paired_difference(diffs)


def pm(row: dict, figure: str, digits: int = 4) -> str:
    """'mean ± 95%' of a row's figure, or of a paired difference ('...; detectable')."""
    value, ci = row.get(figure), row.get(f"{figure}_ci95")
    if value is None:
        return "-"
    sign = "+" if "_vs_" in figure else ""
    text = f"{value:{sign}.{digits}f}" + (f" ± {ci:.{digits}f}" if ci is not None else "")
    mde = row.get(f"{figure}_mde80")
    return text + (f"; {mde:.3f}" if mde is not None else "")


def cell(row: dict, figure: str, spec: str) -> str:
    return "-" if row.get(figure) is None else format(row[figure], spec)
