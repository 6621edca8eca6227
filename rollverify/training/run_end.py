"""A run's end, in the order it is written, and its completion after a stop in between.

The end of a run trained to its last step is written in this order (run.py's _train):

    1. the last step's checkpoint    (its state: the loop's counters, the monitor, the run id)
    2. summary.json                  (atomic: the run is finished from here on)
    3. the MLflow run's artifacts    (config, ledger, summary, curves)
    4. the MLflow run FINISHED

A stop between 1 and 4 (a SIGKILL, a preempted job; kill points `end-summary` before 2 and
`end-mlflow` before 3, infra/kill_points.py) leaves a run that trained everything but did not say
so. `finished_run` completes such an end instead of training again: the summary rebuilt from
the last checkpoint's state and the run's MLflow records (equal to the one the run would have
written, but wall_seconds: the MLflow run's start to its last step's log), then 3 and 4. Each
step of it is idempotent, so a stop in the completion is completed by the next call. A summary
of fewer steps than the newest checkpoint (an extended run, `rvctl resume --steps N`) is an
earlier end, not this one.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollverify.core.methods import METHODS
from rollverify.core.switching import AcceptanceMonitor
from rollverify.infra.atomic_write import atomic_write_text
from rollverify.infra.faults import describe
from rollverify.infra.kill_points import kill_point
from rollverify.tracking.metric_names import OPS_MEAN, REWARD_MEAN
from rollverify.tracking.tracker import MLflowTracker
from rollverify.training.checkpoint.files import newest_state, newest_step
from rollverify.training.run_plan import RunPlan, RunSummary

if TYPE_CHECKING:
    from rollverify.training.loop import TrainingLoop

SUMMARY = "summary.json"
SPOOL = "mlflow-spool.jsonl"  # metrics the store refused, until delivered (tracking/tracker.py)


def summary_of(plan: RunPlan, loop: TrainingLoop, wall_seconds: float) -> RunSummary:
    """The summary of a run that just trained its last step (_rebuilt_summary reads the same
    fields back from the run's records)."""
    counters, last = loop.counters, loop.last_metrics
    return RunSummary(
        run_dir=str(plan.run_dir),
        run_id=loop.tracker.run_id,
        tracking_uri=loop.tracker.uri,
        method=loop.method.name,
        seed=plan.config.train.seed,
        steps=plan.config.train.steps,
        eval_accuracy_before=counters.eval_before,
        eval_accuracy_after=_number(counters.last_eval),
        reward_mean_first=counters.first_metrics.get(REWARD_MEAN, math.nan),
        reward_mean_last=last.get(REWARD_MEAN, math.nan),
        ops_mean_last=last.get(OPS_MEAN, math.nan),
        acceptance_window_mean=loop.monitor.window_mean,
        switch_step=loop.monitor.switch_step,
        wall_seconds=wall_seconds,
        device_seconds=counters.device_seconds,
    )


def write_summary(run_dir: Path, summary: RunSummary) -> None:
    """Step 2 (the run is finished from here on); then the kill point before step 3."""
    atomic_write_text(run_dir / SUMMARY, json.dumps(asdict(summary), indent=2) + "\n")
    kill_point("end-mlflow", summary.steps)  # tests: summary written, MLflow run not closed


def store_artifacts(run_dir: Path, tracker: MLflowTracker, plots: bool) -> None:
    """Step 3: the run folder's results on its MLflow run: config, ledger, summary, and
    (tracking.plots) the run's curves, drawn from what it logged."""
    files = [run_dir / n for n in ("config.yaml", "ledger.json", SUMMARY)]
    tracker.log_artifacts([f for f in files if f.is_file()])
    if plots:
        tracker.deliver()  # metrics a busy store kept back: in the curves too
        from rollverify.tracking.plots import plot_metrics
        from rollverify.tracking.run_records import run_record

        record = run_record(tracker.uri, tracker.run_id)
        tracker.log_artifacts(plot_metrics({record.method: [record]}, run_dir / "plots"), "plots")


def finished_run(run_dir: Path) -> RunSummary | None:
    """The summary of a run trained to its last step, its end completed here if a stop cut
    it off (summary.json rebuilt, the MLflow run closed); None for a run with steps to train
    (or none trained: no checkpoint)."""
    summary = current_summary(run_dir)
    if summary is None:
        found = newest_state(run_dir / "checkpoints")
        if found is None or found[0] < found[1]["config"]["train"]["steps"]:
            return None
        summary = _rebuilt_summary(run_dir, *found)
        write_summary(run_dir, summary)
    _close_mlflow_run(run_dir, summary)
    return summary


def current_summary(run_dir: Path) -> RunSummary | None:
    """summary.json, unless an extended run's newest checkpoint is past the steps it sums."""
    path = run_dir / SUMMARY
    if not path.is_file():
        return None
    summary = RunSummary(**json.loads(path.read_text()))
    newest = newest_step(run_dir / "checkpoints")
    return summary if newest is None or newest <= summary.steps else None


def _rebuilt_summary(run_dir: Path, step: int, state: dict[str, Any]) -> RunSummary:
    """What _train's summary holds, from the last checkpoint's state and the run's MLflow
    records (the last step's metrics are only there: sent first, if a spool kept them)."""
    from mlflow.tracking import MlflowClient

    run_id, uri = state["mlflow"]["run_id"], state["mlflow"]["tracking_uri"]
    if (run_dir / SPOOL).is_file() and not _attached(run_dir, uri, run_id).deliver():
        raise ValueError(
            f"{run_dir}: its last metrics are still in {SPOOL} (the MLflow store {uri} "
            "refuses them); resume it again once the store answers"
        )
    client = MlflowClient(uri)
    last, logged_at = _logged_at(client, run_id, step, (REWARD_MEAN, OPS_MEAN))
    counters, monitor = state["loop"], AcceptanceMonitor()
    monitor.load_state_dict(state["monitor"])
    started = client.get_run(run_id).info.start_time
    config = state["config"]
    return RunSummary(
        run_dir=str(run_dir),
        run_id=run_id,
        tracking_uri=uri,
        method=METHODS[config["train"]["method"]].name,
        seed=config["train"]["seed"],
        steps=config["train"]["steps"],
        eval_accuracy_before=counters["eval_before"],
        eval_accuracy_after=_number(counters["last_eval"]),
        reward_mean_first=counters["first_metrics"].get(REWARD_MEAN, math.nan),
        reward_mean_last=last.get(REWARD_MEAN, math.nan),
        ops_mean_last=last.get(OPS_MEAN, math.nan),
        acceptance_window_mean=monitor.window_mean,
        switch_step=monitor.switch_step,
        wall_seconds=max(0.0, (logged_at - started) / 1000) if logged_at else math.nan,
        device_seconds=counters["device_seconds"],
    )


def _logged_at(
    client: Any, run_id: str, step: int, names: tuple[str, ...]
) -> tuple[dict[str, float], int | None]:
    """Each metric's value at `step` (the newest, if a resumed run logged it again) and the
    time of the newest (ms since the epoch); a metric the step logged as NaN is absent."""
    values, newest = {}, None
    for name in names:
        history = client.get_metric_history(run_id, name)
        points = sorted((p for p in history if p.step == step), key=lambda p: p.timestamp)
        if points:
            values[name], newest = points[-1].value, max(newest or 0, points[-1].timestamp)
    return values, newest


def _close_mlflow_run(run_dir: Path, summary: RunSummary) -> None:
    """Steps 3 and 4 for a run whose MLflow run is not FINISHED. A store that cannot be read
    is warned about: the run's results are in its folder, and the next call closes it."""
    from mlflow.tracking import MlflowClient

    try:
        status = MlflowClient(summary.tracking_uri).get_run(summary.run_id).info.status
    except Exception as error:
        warnings.warn(f"MLflow run {summary.run_id} not closed: {describe(error)}", stacklevel=2)
        return
    if status == "FINISHED":
        return
    tracker = _attached(run_dir, summary.tracking_uri, summary.run_id)
    plots = _config(run_dir).get("tracking", {}).get("plots", False)
    store_artifacts(run_dir, tracker, plots)
    tracker.finish("FINISHED")


def _attached(run_dir: Path, uri: str, run_id: str) -> MLflowTracker:
    """The run's MLflow run, RUNNING again until closed, its spooled metrics sent."""
    try:
        return MLflowTracker.attach(uri, run_id, spool=run_dir / SPOOL)
    except Exception as error:  # the store moved, or the run was deleted
        raise ValueError(
            f"{run_dir}: its MLflow run {run_id} in {uri} cannot be continued "
            f"({describe(error)}); restore that store"
        ) from None


def _config(run_dir: Path) -> dict[str, Any]:
    import yaml

    path = run_dir / "config.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def _number(value: float | None) -> float:
    return math.nan if value is None else value
