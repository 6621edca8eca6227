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

import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rollverify.core.corrections import MASKING
from rollverify.core.methods import METHODS
from rollverify.experiments import vs_baseline
from rollverify.experiments.power import mean_ci95, paired_difference, t_critical_95
from rollverify.experiments.run_figures import (
    counted,
    eval_area,
    finite_only,
    lowest,
    mean,
    parse_value,
    present,
    sort_key,
    switch_step,
)
from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import Report, RunRecord

# where report's users found them first
__all__ = ["counted", "eval_area", "mean_ci95", "switch_step", "t_critical_95"]


# The figures compared with grpo's seed by seed, under their column prefix: each run's value.
PAIRED: dict[str, Callable[[RunRecord], float | None]] = {
    "auc": eval_area,
    "accuracy": lambda run: run.last(m.EVAL_ACCURACY),
    "device_days": lambda run: run.last(m.COST_DEVICE_DAYS),
    "modeled_gpu_days": lambda run: run.last(m.MODELED_GPU_DAYS),
}
# Of those, the ones whose table also says the smallest difference it could detect.
DETECTABLE = ("auc", "accuracy")
# The peers' choices a run may make over our defaults (docs/rules.md, section 6): the param,
# the corrections that read it, its value off the default (as MLflow keeps it), the label.
CORRECTION_CHOICES = (
    ("correction.masked_tokens_in_count", MASKING, "False", "uncounted"),
    ("correction.m2po_scope", ("m2po",), "micro_batch", "micro-batch"),
    ("correction.m2po_clip", ("m2po",), "False", "unclipped"),
)


def correction_choices(run: RunRecord) -> str | None:
    """The peers' choices `run` made where its method reads them, or None: our defaults."""
    method = METHODS.get(run.method)
    correction = method.correction if method else None
    chosen = [
        label
        for param, readers, value, label in CORRECTION_CHOICES
        if correction in readers and run.params.get(param) == value
    ]
    return ", ".join(chosen) or None


# ---- aggregation -------------------------------------------------------------------------


def method_rows(runs: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """One row per method (grpo first, then in order of first appearance in `runs`), per
    choice of the peers' corrections where runs made one (`corrections`: correction_choices),
    and per setting where a method's runs differ in one (`settings`: method_settings; e.g.
    rollverify at the paper's thresholds and at ds=auto are two rows, not one seed twice)."""
    settings = method_settings(runs)
    groups = _group(runs, lambda r: (r.method, correction_choices(r), settings(r)))
    grpo = {key: group for key, group in groups.items() if key[:2] == ("grpo", None)}
    groups = grpo | groups  # grpo's rows first
    rows = [
        {"method": method, "corrections": choices, "settings": _label(setting), **_summary(g)}
        for (method, choices, setting), g in groups.items()
    ]
    row_of = dict(zip(groups, rows, strict=True))
    for row, group in zip(rows, groups.values(), strict=True):
        base = _grpo_of(group[0], list(grpo))
        grpo_row, grpo_group = (row_of[base], grpo[base]) if base else ({}, [])
        if row["method"] != "grpo":  # grpo's own row gets no difference
            row |= paired_diffs(group, grpo_group)
        for days, speedup in [
            ("device_days", "device_speedup_vs_grpo"),
            ("modeled_gpu_days", "modeled_speedup_vs_grpo"),
        ]:
            theirs = (row if row["method"] == "grpo" else grpo_row).get(days)
            row[speedup] = theirs / row[days] if theirs is not None and row[days] else None
    order = ["method", *_corrections_column(rows), *_settings_column(rows)]
    order += ["status", "seeds", "unfinished"]
    order += ["duplicates", "eval_accuracy_before"]
    order += ["eval_auc_mean", "eval_auc_ci95"]
    order += ["eval_accuracy_mean", "eval_accuracy_ci95", "device_days", "device_speedup_vs_grpo"]
    order += ["modeled_gpu_days", "modeled_speedup_vs_grpo"]
    order += ["ops_mean", "staleness_mean", "mismatch_kl", "acceptance_rate_final", "switch_step"]
    order += ["acceptance_window_min", "tokens_cut_sequence_stage", "tokens_cut_token_stage"]
    order += ["pairs", *(column for name in PAIRED for column in paired_columns(name))]
    sets = eval_sets(runs)
    if len(sets) > 1:  # per-set accuracy beside the mean, as the paper's tables
        position = order.index("eval_accuracy_ci95") + 1
        order[position:position] = [column for name in sets for column in set_columns(name)]
    return [finite_only({k: row.get(k) for k in order}) for row in rows]


def _grpo_of(run: RunRecord, grpo: list[tuple]) -> tuple | None:
    """The key of the grpo group `run`'s row is measured against: the one whose settings the
    run shares (grpo at its learning rate), else the only one; None if neither."""
    alike = [key for key in grpo if vs_baseline.matches(run, dict(key[2]))]
    chosen = alike if len(alike) == 1 else grpo if len(grpo) == 1 else []
    return chosen[0] if chosen else None


def _corrections_column(rows: Sequence[dict[str, Any]]) -> list[str]:
    """["corrections"] where a row made one of the peers' choices; else no such column."""
    return ["corrections"] if any(row["corrections"] for row in rows) else []


def method_settings(runs: Sequence[RunRecord]) -> Callable[[RunRecord], tuple]:
    """A run's ((key, value), ...) of the config keys in which its method's finished runs
    differ (verify.ds, verify.dt), () where they agree: vs_baseline.setting_keys, per method.
    An unfinished run joins the row of its values of those keys (a run killed at step 3 of a
    shortened config is not a setting of its own)."""
    by_method = _group((r for r in runs if r.finished), lambda r: r.method)
    choices = [param for param, *_ in CORRECTION_CHOICES]  # the corrections column's
    keys = {method: vs_baseline.setting_keys(group, choices) for method, group in by_method.items()}
    return lambda run: tuple((key, vs_baseline.value(run, key)) for key in keys.get(run.method, []))


def _label(setting: tuple) -> str | None:
    """((verify.ds, auto), (verify.dt, auto)) -> "ds=auto, dt=auto"; None for ()."""
    names = short_names([key for key, _ in setting])
    return ", ".join(f"{n}={v}" for n, (_, v) in zip(names, setting, strict=True)) or None


def _settings_column(rows: Sequence[dict[str, Any]]) -> list[str]:
    """["settings"] where a method's runs differ in a setting; else no such column."""
    return ["settings"] if any(row["settings"] for row in rows) else []


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


def paired_columns(name: str) -> tuple[str, ...]:
    """A paired figure's columns: mean difference to grpo, half-width of its 95% interval,
    and (DETECTABLE figures) the smallest difference detectable at 80% power."""
    columns = (f"{name}_diff_vs_grpo", f"{name}_diff_ci95")
    return (*columns, f"{name}_mde80") if name in DETECTABLE else columns


def paired_diffs(group: Sequence[RunRecord], grpo: Sequence[RunRecord]) -> dict[str, Any]:
    """`group` minus `grpo` on each seed both finished: mean, paired 95% t half-width, and
    the detectable difference at 80% power given the differences' spread.

    `pairs` counts those seeds. A seed finished twice on one side counts once (its first
    run: counted). With fewer than FEWEST_PAIRS differences (power.py) the half-width and the
    detectable difference are None.
    """
    ours, theirs = _seed_runs(counted(group)), _seed_runs(counted(grpo))
    seeds = sorted(ours.keys() & theirs.keys())
    row: dict[str, Any] = {"pairs": len(seeds)}
    for name, value in PAIRED.items():
        values = [(_mean_of(ours[s], value), _mean_of(theirs[s], value)) for s in seeds]
        diffs = [a - b for a, b in values if a is not None and b is not None]
        columns = paired_columns(name)  # (mean, interval[, detectable]: DETECTABLE figures)
        row |= dict(zip(columns, paired_difference(diffs)[: len(columns)], strict=True))
    return row


def sweep_rows(runs: Sequence[RunRecord], sweep_params: Sequence[str]) -> list[dict[str, Any]]:
    """One row per grid point, sorted by the swept values; keys are their short names (`ds`).

    When the runs hold more than one method (and the method was not swept), the method is part
    of the grid point.
    """
    names = short_names(sweep_params)
    by_method = len({r.method for r in runs}) > 1 and "train.method" not in sweep_params

    def point(run: RunRecord) -> tuple:
        values = tuple(parse_value(run.params.get(p)) for p in sweep_params)
        return ((run.method,) if by_method else ()) + values

    groups = _group(runs, point)
    keys = (["method"] if by_method else []) + names
    grpo_points = _grpo_points(groups, keys)
    rows = []
    for values in sorted(groups, key=lambda v: [sort_key(x) for x in v]):
        summary = _summary(groups[values])
        row = dict(zip(keys, values, strict=True))
        choices = {correction_choices(r) for r in groups[values]} - {None}
        row["corrections"] = "; ".join(sorted(choices)) or None
        for key in ["status", "seeds", "unfinished", "duplicates", "eval_auc_mean"]:
            row[key] = summary[key]
        for key in ["eval_auc_ci95", "eval_accuracy_mean", "eval_accuracy_ci95"]:
            row[key] = summary[key]
        row["device_days"] = summary["device_days"]
        row["modeled_gpu_days"] = summary["modeled_gpu_days"]
        for key in ["ops_mean", "staleness_mean", "mismatch_kl"]:
            row[key] = summary[key]
        for key in ["acceptance_rate_final", "switch_step", "acceptance_window_min"]:
            row[key] = summary[key]
        for key in ["tokens_cut_sequence_stage", "tokens_cut_token_stage"]:
            row[key] = summary[key]
        if grpo_points:  # a grid over methods: each point against grpo's at the same values
            base = grpo_points.get(values)
            row |= paired_diffs(groups[values], groups[base]) if base else _no_pairs()
        rows.append(finite_only(row))
    if not _corrections_column(rows):
        rows = [{k: v for k, v in row.items() if k != "corrections"} for row in rows]
    return rows


def _grpo_points(groups: dict[tuple, list], keys: list[str]) -> dict[tuple, tuple]:
    """In a grid over methods, each non-grpo point's grpo point: the one with the same other
    values; where there is none and grpo ran at one point only, that one (e.g. `sweep method dt`
    reported beside a grpo sweep: grpo never reads dt, so its one point is every dt's)."""
    if "method" not in keys:
        return {}
    i = keys.index("method")
    grpo = [values for values in groups if values[i] == "grpo"]
    found = {}
    for values in groups:
        base = (*values[:i], "grpo", *values[i + 1 :])
        if values[i] != "grpo" and (base in groups or len(grpo) == 1):
            found[values] = base if base in groups else grpo[0]
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
    """Runs by plot line: method (and the corrections and settings its table row names), or
    grid point for a sweep. Finished runs only; a group with none gets its unfinished runs,
    labelled so."""
    if report.kind == "sweep" and report.sweep_params:
        names = short_names(report.sweep_params)

        def label(run: RunRecord) -> str:
            values = [run.params.get(p) for p in report.sweep_params]
            return ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=True))
    else:
        settings = method_settings(report.runs)

        def label(run: RunRecord) -> str:
            shown = [x for x in (correction_choices(run), _label(settings(run))) if x]
            return f"{run.method} ({'; '.join(shown)})" if shown else run.method

    groups = {}
    for name, group in _group(report.runs, label).items():
        finished = counted(group)
        groups[name if finished else f"{name} (unfinished)"] = finished or group
    return groups


def _summary(group: Sequence[RunRecord]) -> dict[str, Any]:
    """Means over the finished runs of a group, one per seed; the others are only counted."""
    done = counted(group)
    finished = sum(r.finished for r in group)
    accuracy, ci95 = mean_ci95(present(r.last(m.EVAL_ACCURACY) for r in done))
    area, area_ci95 = mean_ci95(present(eval_area(r) for r in done))
    switches = present(switch_step(r) for r in done)
    return {
        "status": "finished" if done else "unfinished",
        "seeds": len(done),
        "unfinished": len(group) - finished,
        "duplicates": finished - len(done),
        "eval_accuracy_before": mean(r.history.get(m.EVAL_ACCURACY, {}).get(0) for r in done),
        "eval_auc_mean": area,
        "eval_auc_ci95": area_ci95,
        "eval_accuracy_mean": accuracy,
        "eval_accuracy_ci95": ci95,
        "device_days": mean(r.last(m.COST_DEVICE_DAYS) for r in done),
        "modeled_gpu_days": mean(r.last(m.MODELED_GPU_DAYS) for r in done),
        "ops_mean": _mean_over_steps(done, m.OPS_MEAN),
        "staleness_mean": _mean_over_steps(done, m.STALENESS_MEAN),
        "mismatch_kl": _mean_over_steps(done, m.MISMATCH_KL),
        "acceptance_rate_final": mean(r.last(m.ACCEPTANCE_RATE) for r in done),
        # median over the seeds that switched
        "switch_step": statistics.median(switches) if switches else None,
        "acceptance_window_min": mean(lowest(r, m.ACCEPTANCE_WINDOW_MEAN) for r in done),
        "tokens_cut_sequence_stage": mean(r.total(m.TOKENS_CUT_SEQUENCE_STAGE) for r in done),
        "tokens_cut_token_stage": mean(r.total(m.TOKENS_CUT_TOKEN_STAGE) for r in done),
    } | {
        column: mean(r.last(metric(name)) for r in done)
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
    return mean(r.mean(metric) for r in runs)


def _mean_of(runs: Iterable[RunRecord], value: Callable[[RunRecord], float | None]):
    return mean(value(r) for r in runs)
