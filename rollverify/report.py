"""The paper's tables from an MLflow store: what `rvctl report` prints.

Two steps. `load_report` resolves the targets (run ids, or compare/sweep folders holding
`parent.json`) and reads their training runs into `RunRecord`s: one `get_metric_history` call
per metric per run (~10 ms each on sqlite; fine for tens of runs). `method_rows`,
`sweep_rows` and `sweep_grid` are pure: records in, rows (dicts sharing keys) out.

Only FINISHED runs are averaged; the others are counted in `unfinished`. A number that cannot
be computed is None (null in json), never 0 or NaN.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollverify import metrics as m

PARENT_KINDS = ("compare", "sweep")
# The metrics the tables and plots read (names from docs/metrics.md); others are not fetched.
REPORT_METRICS = (
    m.EVAL_ACCURACY,
    m.COST_GPU_DAYS,
    m.MODELED_GPU_DAYS,
    m.OPS_MEAN,
    m.ACCEPTANCE_RATE,
    m.SWITCHED,
    m.REWARD_MEAN,
    m.ENTROPY_MEAN,
    m.RESPONSE_LENGTH_MEAN,
)
# Two-sided 95% Student t quantiles t(0.975, dof), used when scipy is not installed.
_T95 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980,
}  # fmt: skip


@dataclass
class RunRecord:
    """One training run, as the report needs it.

    history: metric name -> {step: value}, NaN dropped. Steps are optimizer steps 1..N;
    `eval_accuracy` also has step 0 (the base model). Cost metrics are cumulative.
    """

    run_id: str
    method: str
    seed: int | None
    status: str  # MLflow: FINISHED, RUNNING, KILLED, FAILED, SCHEDULED
    start_time: int  # ms since the epoch
    params: dict[str, str]  # the flattened resolved config, e.g. "verify.ds": "0.01"
    history: dict[str, dict[int, float]]

    @property
    def finished(self) -> bool:
        return self.status == "FINISHED"

    def last(self, metric: str) -> float | None:
        """The value at the largest logged step, or None if never logged."""
        values = self.history.get(metric)
        return values[max(values)] if values else None


@dataclass
class Report:
    tracking_uri: str
    kind: str  # "compare" or "sweep" (every target was such a parent), else "runs"
    parent_run_ids: list[str]
    sweep_params: list[str]  # dotted config keys swept, e.g. ["verify.ds", "verify.dt"]
    runs: list[RunRecord]  # oldest first


# ---- reading MLflow ----------------------------------------------------------------------


def load_report(targets: Sequence[str] = (), tracking_uri: str | None = None) -> Report:
    """Resolve targets and read their training runs.

    A target is a run id (a training run, or a compare/sweep parent: its children), or a
    folder holding `parent.json` (its `tracking_uri` is used unless `tracking_uri` is given).
    No target: the newest parent in the store, else every training run in it.
    """
    folders = {t: _read_parent_json(Path(t)) for t in targets if _looks_like_path(t)}
    # MLflow takes ~3 s to import: a bad folder is reported before that.
    from mlflow.tracking import MlflowClient

    from rollverify.tracking import child_runs, default_tracking_uri

    uri = tracking_uri or next(
        (rec["tracking_uri"] for rec in folders.values()), default_tracking_uri("runs")
    )
    _check_store_exists(uri)
    client = MlflowClient(tracking_uri=uri)
    experiment_ids = [e.experiment_id for e in client.search_experiments()]
    run_ids = [folders[t]["run_id"] if t in folders else t for t in targets]
    resolved = _resolve(client, experiment_ids, run_ids, targets, uri)

    parents = [r for r in resolved if r.data.tags.get("kind") in PARENT_KINDS]
    runs = {r.info.run_id: r for r in resolved if _is_training(r)}
    for parent in parents:
        children = child_runs(client, parent.info.run_id)
        runs.update((r.info.run_id, r) for r in children if _is_training(r))
    if not runs:
        names = ", ".join(r.info.run_id for r in resolved)
        raise ValueError(f"{names}: no training runs yet (a parent without children?)")

    kinds = {r.data.tags.get("kind") for r in resolved}
    kind = kinds.pop() if len(kinds) == 1 and parents else "runs"
    sweep_params = [p for r in parents for p in r.data.tags.get("sweep_params", "").split(",") if p]
    records = sorted((_record(client, r) for r in runs.values()), key=lambda r: r.start_time)
    return Report(
        uri, kind, [p.info.run_id for p in parents], list(dict.fromkeys(sweep_params)), records
    )


def _resolve(
    client: Any, experiment_ids: list[str], run_ids: list[str], targets: Sequence[str], uri: str
) -> list[Any]:
    """MLflow runs for the targets; none given: the newest parent, else every training run."""
    from mlflow.exceptions import MlflowException

    if not targets:
        every = client.search_runs(experiment_ids, order_by=["attributes.start_time DESC"])
        parents = [r for r in every if r.data.tags.get("kind") in PARENT_KINDS]
        training = [r for r in every if _is_training(r)]
        if not parents and not training:
            raise ValueError(f"no training runs in {uri}; train or compare first, or pass a run id")
        return parents[:1] or training
    resolved = []
    for target, run_id in zip(targets, run_ids, strict=True):
        try:
            resolved.append(client.get_run(run_id))
        except MlflowException:
            raise ValueError(
                f"{target}: no such run in {uri}; pass a run id from this store "
                "(or --tracking-uri), or a compare/sweep output folder with parent.json"
            ) from None
    return resolved


def _looks_like_path(target: str) -> bool:
    return Path(target).exists() or "/" in target or target.startswith(".")


def _read_parent_json(path: Path) -> dict[str, str]:
    file = path if path.name == "parent.json" else path / "parent.json"
    if not path.exists():
        raise ValueError(f"{path}: no such folder; pass a run id or a compare/sweep output folder")
    if not file.is_file():
        raise ValueError(f"{path}: no parent.json here; pass a compare/sweep output folder")
    try:
        record = json.loads(file.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{file}: not valid JSON ({error})") from None
    if not isinstance(record, dict) or not {"run_id", "tracking_uri"} <= record.keys():
        raise ValueError(f"{file}: needs keys run_id and tracking_uri")
    return record


def _check_store_exists(uri: str) -> None:
    """Reading must not create an empty sqlite store as a side effect."""
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        if not path.is_file():
            raise ValueError(
                f"no MLflow store at {path}; train or compare first, or pass --tracking-uri"
            )


def _is_training(run: Any) -> bool:
    """Training runs carry a `method` tag; parents (a sweep's has one too) carry `kind`."""
    tags = run.data.tags
    return "method" in tags and tags.get("kind") not in PARENT_KINDS


def _record(client: Any, run: Any) -> RunRecord:
    history = {}
    for name in REPORT_METRICS:
        if name not in run.data.metrics:
            continue
        points = sorted(
            client.get_metric_history(run.info.run_id, name), key=lambda m: (m.step, m.timestamp)
        )
        history[name] = {m.step: m.value for m in points if not math.isnan(m.value)}
    seed = run.data.tags.get("seed", "")
    return RunRecord(
        run_id=run.info.run_id,
        method=run.data.tags["method"],
        seed=int(seed) if seed.lstrip("-").isdigit() else None,
        status=run.info.status,
        start_time=run.info.start_time or 0,
        params=dict(run.data.params),
        history=history,
    )


# ---- aggregation -------------------------------------------------------------------------


def method_rows(runs: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """One row per method (grpo first, then in order of first appearance in `runs`)."""
    groups = _group(runs, lambda r: r.method)
    if "grpo" in groups:
        groups = {"grpo": groups.pop("grpo"), **groups}
    rows = [{"method": method, **_summary(group)} for method, group in groups.items()]
    grpo = rows[0] if rows and rows[0]["method"] == "grpo" else {}
    for row in rows:
        for days, speedup in [
            ("gpu_days", "speedup_vs_grpo"),
            ("modeled_gpu_days", "modeled_speedup_vs_grpo"),
        ]:
            base = grpo.get(days)
            row[speedup] = base / row[days] if base is not None and row[days] else None
    order = ["method", "status", "seeds", "unfinished", "eval_accuracy_before"]
    order += ["eval_accuracy_mean", "eval_accuracy_ci95", "gpu_days", "speedup_vs_grpo"]
    order += ["modeled_gpu_days", "modeled_speedup_vs_grpo"]
    order += ["ops_mean", "acceptance_rate_final", "switch_step"]
    return [_clean({k: row[k] for k in order}) for row in rows]


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
    rows = []
    for values in sorted(groups, key=lambda v: [_sort_key(x) for x in v]):
        summary = _summary(groups[values])
        row = dict(zip(keys, values, strict=True))
        for key in ["status", "seeds", "unfinished", "eval_accuracy_mean", "eval_accuracy_ci95"]:
            row[key] = summary[key]
        row["gpu_days"] = summary["gpu_days"]
        row["modeled_gpu_days"] = summary["modeled_gpu_days"]
        row["acceptance_rate_final"] = summary["acceptance_rate_final"]
        rows.append(_clean(row))
    return rows


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
        finished = [r for r in group if r.finished]
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
    """t(0.975, dof): scipy's when installed, else a table (rounded down to the next dof)."""
    try:
        from scipy.special import stdtrit  # ~0.3 s to import; scipy.stats costs ~2 s
    except ImportError:
        return _T95[max((d for d in _T95 if d <= dof), default=1)] if dof <= 120 else 1.96
    return float(stdtrit(dof, 0.975))


def _summary(group: Sequence[RunRecord]) -> dict[str, Any]:
    """Means over the finished runs of a group; unfinished ones are only counted."""
    done = [r for r in group if r.finished]
    accuracy, ci95 = mean_ci95(_present(r.last(m.EVAL_ACCURACY) for r in done))
    switches = _present(_first_step(r, m.SWITCHED, lambda v: v >= 0.5) for r in done)
    return {
        "status": "finished" if done else "unfinished",
        "seeds": len(done),
        "unfinished": len(group) - len(done),
        "eval_accuracy_before": _mean(r.history.get(m.EVAL_ACCURACY, {}).get(0) for r in done),
        "eval_accuracy_mean": accuracy,
        "eval_accuracy_ci95": ci95,
        "gpu_days": _mean(r.last(m.COST_GPU_DAYS) for r in done),
        "modeled_gpu_days": _mean(r.last(m.MODELED_GPU_DAYS) for r in done),
        "ops_mean": _mean(_mean(r.history.get(m.OPS_MEAN, {}).values()) for r in done),
        "acceptance_rate_final": _mean(r.last(m.ACCEPTANCE_RATE) for r in done),
        # median over the seeds that switched
        "switch_step": statistics.median(switches) if switches else None,
    }


def _group(runs: Iterable[RunRecord], key: Callable[[RunRecord], Any]) -> dict[Any, list]:
    groups: dict[Any, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault(key(run), []).append(run)
    return groups


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
