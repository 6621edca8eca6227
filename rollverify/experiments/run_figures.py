"""One run's figures, and the runs a table counts: what `rvctl report`'s tables (report.py) and
the study's tables (vs_baseline.py, dose_response.py, composition.py) compute their rows from.

A figure that cannot be computed is None, never 0 or NaN: a run without it is left out of a
mean, and a pair without both is left out of a paired difference.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from typing import Any

from rollverify.experiments.power import curve_area, mean_ci95, paired_difference
from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import RunRecord

Figure = Callable[[RunRecord], float | None]


def eval_area(run: RunRecord) -> float | None:
    """The normalised area under the run's evaluation curve (eval_accuracy over its steps,
    step 0 included): rollverify/experiments/power.py."""
    return curve_area(run.history.get(m.EVAL_ACCURACY, {}))


def switch_step(run: RunRecord) -> int | None:
    """The step a run switched to on-policy rollout (`switched` first on); None if it never did."""
    return first_step(run, m.SWITCHED, lambda v: v >= 0.5)


def counted(runs: Iterable[RunRecord]) -> list[RunRecord]:
    """The finished runs a row averages: the first of each seed (`runs` oldest first, as
    load_report gives them); runs of an unknown seed all count."""
    seen: set[int] = set()
    kept = []
    for run in runs:
        if not run.finished or run.seed in seen:
            continue
        kept.append(run)
        if run.seed is not None:
            seen.add(run.seed)
    return kept


def mean_over_steps(run: RunRecord, metric: str, last_step: int | None = None) -> float | None:
    """The metric's mean over the run's logged steps (up to last_step); None if never logged."""
    values = [
        v for s, v in run.history.get(metric, {}).items() if last_step is None or s <= last_step
    ]
    return statistics.fmean(values) if values else None


def mean_of_first(run: RunRecord, metric: str, count: int) -> float | None:
    """The metric's mean over the first `count` steps that logged it; None if none did."""
    history = run.history.get(metric, {})
    values = [history[step] for step in sorted(history)[:count]]
    return statistics.fmean(values) if values else None


def mean_and_ci(runs: Iterable[RunRecord], figure: Figure) -> tuple[float | None, float | None]:
    """Mean over runs of a figure, with its 95% half-width; runs without it left out."""
    return mean_ci95([v for v in (figure(r) for r in runs) if v is not None])


def paired_by_seed(
    runs: Iterable[RunRecord], base: dict[int, RunRecord], figure: Figure
) -> tuple[float | None, float | None, float | None]:
    """(mean, 95% half-width, smallest difference detectable at 80% power) of figure(run) -
    figure(base run of the same seed), over the runs whose seed has a base run and both values."""
    return paired_difference(paired_diffs(runs, base, figure))


def paired_diffs(
    runs: Iterable[RunRecord], base: dict[int, RunRecord], figure: Figure
) -> list[float]:
    """figure(run) - figure(base run of the same seed), for each run with a twin and both."""
    diffs = []
    for run in runs:
        twin = base.get(run.seed)
        if twin is None:
            continue
        mine, theirs = figure(run), figure(twin)
        if mine is not None and theirs is not None:
            diffs.append(mine - theirs)
    return diffs


def lowest(run: RunRecord, metric: str) -> float | None:
    values = present(run.history.get(metric, {}).values())
    return min(values) if values else None


def highest(run: RunRecord, metric: str) -> float | None:
    values = present(run.history.get(metric, {}).values())
    return max(values) if values else None


def first_step(run: RunRecord, metric: str, test: Callable[[float], bool]) -> int | None:
    steps = sorted(s for s, v in run.history.get(metric, {}).items() if test(v))
    return steps[0] if steps else None


def present(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def mean(values: Iterable[float | None]) -> float | None:
    kept = present(values)
    return statistics.fmean(kept) if kept else None


def mean_last(runs: Iterable[RunRecord], metric: str) -> float | None:
    """Mean over runs of each run's last value of the metric."""
    return mean(r.last(metric) for r in runs)


def finite_only(row: dict[str, Any]) -> dict[str, Any]:
    """NaN/inf numbers -> None, so json never holds NaN."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def parse_value(text: str | None) -> int | float | str | None:
    """A param as a number when it is one ("0.01" -> 0.01, "4" -> 4); "inf" stays a string."""
    if text is None:
        return None
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        return value if math.isfinite(value) else text
    return text


def sort_key(value: Any) -> tuple:
    """Numbers (and "inf") in numeric order, then strings, then missing values."""
    if value is None:
        return (2, 0.0, "")
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, str(value))
