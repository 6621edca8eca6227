"""The paper's tables from an MLflow store: what `rvctl report` prints.

Two steps. `load_report` (rollverify/tracking/run_records.py) reads the targets' training runs from
MLflow into `RunRecord`s. `method_rows`, `sweep_rows` and `sweep_grid` are pure: records in,
rows (dicts sharing keys) out.

Only FINISHED runs are averaged, one per seed: the others are counted in `unfinished`, and a
further finished run of a seed the row already counts in `duplicates` (a store may hold a
sweep's grid point trained twice by older code). A number that cannot be computed is None (null
in json), never 0 or NaN.

Beside each method's means, its difference to grpo with a paired t interval: runs pair by
seed, so what a seed does to both methods alike (data order, sampling) cancels out of it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import Report, RunRecord

# The metrics compared with grpo's seed by seed, under their column prefix.
PAIRED = {
    "accuracy": m.EVAL_ACCURACY,
    "gpu_days": m.COST_GPU_DAYS,
    "modeled_gpu_days": m.MODELED_GPU_DAYS,
}
MIN_PAIRS = 3  # fewer: no interval (2 pairs leave one dof, t = 12.7: an interval of no use)


# ---- aggregation -------------------------------------------------------------------------


def method_rows(runs: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """One row per method (grpo first, then in order of first appearance in `runs`)."""
    groups = _group(runs, lambda r: r.method)
    if "grpo" in groups:
        groups = {"grpo": groups.pop("grpo"), **groups}
    rows = [{"method": method, **_summary(group)} for method, group in groups.items()]
    for row, group in zip(rows, groups.values(), strict=True):
        if row["method"] != "grpo":  # grpo's own row gets no difference
            row |= paired_diffs(group, groups.get("grpo", []))
    grpo = rows[0] if rows and rows[0]["method"] == "grpo" else {}
    for row in rows:
        for days, speedup in [
            ("gpu_days", "speedup_vs_grpo"),
            ("modeled_gpu_days", "modeled_speedup_vs_grpo"),
        ]:
            base = grpo.get(days)
            row[speedup] = base / row[days] if base is not None and row[days] else None
    order = ["method", "status", "seeds", "unfinished", "duplicates", "eval_accuracy_before"]
    order += ["eval_accuracy_mean", "eval_accuracy_ci95", "gpu_days", "speedup_vs_grpo"]
    order += ["modeled_gpu_days", "modeled_speedup_vs_grpo"]
    order += ["ops_mean", "staleness_mean", "mismatch_kl", "acceptance_rate_final", "switch_step"]
    order += ["pairs", *(column for name in PAIRED for column in paired_columns(name))]
    sets = eval_sets(runs)
    if len(sets) > 1:  # per-set accuracy beside the mean, as the paper's tables
        position = order.index("eval_accuracy_ci95") + 1
        order[position:position] = [column for name in sets for column in set_columns(name)]
    return [_clean({k: row.get(k) for k in order}) for row in rows]


def eval_sets(runs: Sequence[RunRecord]) -> list[str]:
    """The eval sets the runs logged (eval/<set>/...), in order of first appearance."""
    names: dict[str, None] = {}
    for run in runs:
        for metric in run.history:
            if (name := m.eval_set_of(metric)) is not None:
                names[name] = None
    return list(names)


def set_columns(name: str) -> tuple[str, str]:
    """A set's report columns: mean over finished seeds of its last avg@k and pass@k."""
    return f"{name}_avg_at_k", f"{name}_pass_at_k"


def paired_columns(name: str) -> tuple[str, str]:
    """A paired metric's columns: mean difference to grpo, half-width of its 95% interval."""
    return f"{name}_diff_vs_grpo", f"{name}_diff_ci95"


def paired_diffs(group: Sequence[RunRecord], grpo: Sequence[RunRecord]) -> dict[str, Any]:
    """`group` minus `grpo` on each seed both finished: mean and paired 95% t half-width.

    `pairs` counts those seeds. A seed finished twice on one side counts once (its first
    run: counted). With fewer than MIN_PAIRS differences the half-width is None.
    """
    ours, theirs = _seed_runs(counted(group)), _seed_runs(counted(grpo))
    seeds = sorted(ours.keys() & theirs.keys())
    row: dict[str, Any] = {"pairs": len(seeds)}
    for name, metric in PAIRED.items():
        values = [(_mean_last(ours[s], metric), _mean_last(theirs[s], metric)) for s in seeds]
        diffs = [a - b for a, b in values if a is not None and b is not None]
        mean, ci95 = mean_ci95(diffs)
        ci95 = ci95 if len(diffs) >= MIN_PAIRS else None
        row |= dict(zip(paired_columns(name), (mean, ci95), strict=True))
    return row


def sweep_rows(runs: Sequence[RunRecord], sweep_params: Sequence[str]) -> list[dict[str, Any]]:
    """One row per grid point, sorted by the swept values; keys are their short names (`ds`).

    When the runs hold more than one method (and the method was not swept), the method is part
    of the grid point.
    """
    names = short_names(sweep_params)
    by_method = len({r.method for r in runs}) > 1 and "train.method" not in sweep_params

    def point(run: RunRecord) -> tuple:
        values = tuple(_parse_value(run.params.get(p)) for p in sweep_params)
        return ((run.method,) if by_method else ()) + values

    groups = _group(runs, point)
    keys = (["method"] if by_method else []) + names
    grpo_points = _grpo_points(groups, keys)
    rows = []
    for values in sorted(groups, key=lambda v: [_sort_key(x) for x in v]):
        summary = _summary(groups[values])
        row = dict(zip(keys, values, strict=True))
        for key in ["status", "seeds", "unfinished", "duplicates"]:
            row[key] = summary[key]
        for key in ["eval_accuracy_mean", "eval_accuracy_ci95"]:
            row[key] = summary[key]
        row["gpu_days"] = summary["gpu_days"]
        row["modeled_gpu_days"] = summary["modeled_gpu_days"]
        for key in ["ops_mean", "staleness_mean", "mismatch_kl"]:
            row[key] = summary[key]
        for key in ["acceptance_rate_final", "switch_step"]:
            row[key] = summary[key]
        if grpo_points:  # a grid over methods: each point against grpo's at the same values
            base = grpo_points.get(values)
            row |= paired_diffs(groups[values], groups[base]) if base else _no_pairs()
        rows.append(_clean(row))
    return rows


def _grpo_points(groups: dict[tuple, list], keys: list[str]) -> dict[tuple, tuple]:
    """In a grid over methods, each non-grpo point's grpo point (the same other values)."""
    if "method" not in keys:
        return {}
    i = keys.index("method")
    found = {}
    for values in groups:
        base = (*values[:i], "grpo", *values[i + 1 :])
        if values[i] != "grpo" and base in groups:
            found[values] = base
    return found


def _no_pairs() -> dict[str, Any]:
    """The paired columns of a row without a grpo to pair with (grpo's own)."""
    return {"pairs": None} | {c: None for name in PAIRED for c in paired_columns(name)}


def sweep_grid(
    rows: Sequence[dict[str, Any]], row_key: str, column_key: str, value: str
) -> list[dict[str, Any]]:
    """sweep_rows as a table: `row_key` values down, `column_key` values across, `value` cells.

    E.g. sweep_grid(rows, "ds", "dt", "eval_accuracy_mean") -> [{"ds": 0.01, "dt=2": ..}].
    """

    def column(row: dict[str, Any]) -> str:
        label = row[column_key]
        return f"{column_key}={label:g}" if isinstance(label, float) else f"{column_key}={label}"

    empty = dict.fromkeys(dict.fromkeys(column(r) for r in rows))
    grid: dict[Any, dict[str, Any]] = {}
    for r in rows:
        grid.setdefault(r[row_key], {row_key: r[row_key]} | empty)[column(r)] = r[value]
    return list(grid.values())


def short_names(dotted: Sequence[str]) -> list[str]:
    """["verify.ds", "verify.dt"] -> ["ds", "dt"]; a name kept whole if its short one clashes."""
    last = [d.rsplit(".", 1)[-1] for d in dotted]
    return [s if last.count(s) == 1 else d for s, d in zip(last, dotted, strict=True)]


def run_groups(report: Report) -> dict[str, list[RunRecord]]:
    """Runs by plot line: method, or grid point for a sweep. Finished runs only; a group with
    none gets its unfinished runs, labelled so."""
    if report.kind == "sweep" and report.sweep_params:
        names = short_names(report.sweep_params)

        def label(run: RunRecord) -> str:
            values = [run.params.get(p) for p in report.sweep_params]
            return ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=True))
    else:

        def label(run: RunRecord) -> str:
            return run.method

    groups = {}
    for name, group in _group(report.runs, label).items():
        finished = counted(group)
        groups[name if finished else f"{name} (unfinished)"] = finished or group
    return groups


def mean_ci95(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and the half-width of its 95% Student t interval (None when n < 2)."""
    if not values:
        return None, None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, t_critical_95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def t_critical_95(dof: int) -> float:
    """t(0.975, dof), the two-sided 95% Student t quantile."""
    from scipy.special import stdtrit  # lighter to import than scipy.stats

    return float(stdtrit(dof, 0.975))


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


def _summary(group: Sequence[RunRecord]) -> dict[str, Any]:
    """Means over the finished runs of a group, one per seed; the others are only counted."""
    done = counted(group)
    finished = sum(r.finished for r in group)
    accuracy, ci95 = mean_ci95(_present(r.last(m.EVAL_ACCURACY) for r in done))
    switches = _present(_first_step(r, m.SWITCHED, lambda v: v >= 0.5) for r in done)
    return {
        "status": "finished" if done else "unfinished",
        "seeds": len(done),
        "unfinished": len(group) - finished,
        "duplicates": finished - len(done),
        "eval_accuracy_before": _mean(r.history.get(m.EVAL_ACCURACY, {}).get(0) for r in done),
        "eval_accuracy_mean": accuracy,
        "eval_accuracy_ci95": ci95,
        "gpu_days": _mean(r.last(m.COST_GPU_DAYS) for r in done),
        "modeled_gpu_days": _mean(r.last(m.MODELED_GPU_DAYS) for r in done),
        "ops_mean": _mean_over_steps(done, m.OPS_MEAN),
        "staleness_mean": _mean_over_steps(done, m.STALENESS_MEAN),
        "mismatch_kl": _mean_over_steps(done, m.MISMATCH_KL),
        "acceptance_rate_final": _mean(r.last(m.ACCEPTANCE_RATE) for r in done),
        # median over the seeds that switched
        "switch_step": statistics.median(switches) if switches else None,
    } | {
        column: _mean(r.last(metric(name)) for r in done)
        for name in eval_sets(group)
        for column, metric in zip(
            set_columns(name), (m.eval_avg_at_k, m.eval_pass_at_k), strict=True
        )
    }


def _group(runs: Iterable[RunRecord], key: Callable[[RunRecord], Any]) -> dict[Any, list]:
    groups: dict[Any, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault(key(run), []).append(run)
    return groups


def _seed_runs(runs: Iterable[RunRecord]) -> dict[int, list[RunRecord]]:
    """The finished runs with a known seed, by seed."""
    return _group((r for r in runs if r.finished and r.seed is not None), lambda r: r.seed)


def _mean_over_steps(runs: Iterable[RunRecord], metric: str) -> float | None:
    """Mean over runs of each run's mean over its steps."""
    return _mean(_mean(r.history.get(metric, {}).values()) for r in runs)


def _mean_last(runs: Iterable[RunRecord], metric: str) -> float | None:
    return _mean(r.last(metric) for r in runs)


def _first_step(run: RunRecord, metric: str, test: Callable[[float], bool]) -> int | None:
    steps = sorted(s for s, v in run.history.get(metric, {}).items() if test(v))
    return steps[0] if steps else None


def _present(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _mean(values: Iterable[float | None]) -> float | None:
    present = _present(values)
    return statistics.fmean(present) if present else None


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """NaN/inf numbers -> None, so json never holds NaN."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def _parse_value(text: str | None) -> int | float | str | None:
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


def _sort_key(value: Any) -> tuple:
    """Numbers (and "inf") in numeric order, then strings, then missing values."""
    if value is None:
        return (2, 0.0, "")
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, str(value))
