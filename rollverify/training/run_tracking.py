"""A run's MLflow run: made with the run (its id in the folder's mlflow.json from then on) or
continued, the machine's metrics beside it (tracking.system_metrics), and the run's results
stored on it when the run ends."""

from __future__ import annotations

import json
from pathlib import Path

from rollverify.config import RunConfig
from rollverify.infra.atomic_write import atomic_write_text
from rollverify.infra.faults import describe
from rollverify.tracking.tracker import MLflowTracker, default_tracking_uri
from rollverify.training.run_plan import RunPlan

MLFLOW_RUN = "mlflow.json"  # in the run folder: its MLflow run, from the moment it exists


def run_tracker(plan: RunPlan, method: str) -> MLflowTracker:
    """The run's MLflow run: continued if the folder names one (RUN/mlflow.json, written as
    soon as the run is created; its spooled metrics are sent first), else a new one."""
    config, run_dir = plan.config, plan.run_dir
    spool = run_dir / "mlflow-spool.jsonl"
    saved = _saved_mlflow_run(plan)
    if saved is not None:
        try:
            tracker = MLflowTracker.attach(
                saved["tracking_uri"], saved["run_id"], spool=spool, log_once=True
            )
        except Exception as error:  # the store moved, or the run was deleted
            raise ValueError(
                f"MLflow run {saved['run_id']} in {saved['tracking_uri']} cannot be continued "
                f"({describe(error)}); restore that store"
            ) from None
        _watch_system(config, tracker, resumed=True)
        return tracker
    tracker = MLflowTracker(
        config.tracking.uri or default_tracking_uri(config.output),
        config.tracking.experiment,
        run_name=run_dir.name,
        params=config.to_dict(),
        tags={
            "method": method,
            "seed": str(config.train.seed),
            "engine": config.engine(),
            "run_dir": str(run_dir.resolve()),
        },
        artifact_root=Path(config.output).resolve() / "mlartifacts",
        parent_run_id=plan.parent_run_id,
        spool=spool,
    )
    record = {"run_id": tracker.run_id, "tracking_uri": tracker.uri}
    atomic_write_text(run_dir / MLFLOW_RUN, json.dumps(record, indent=2) + "\n")
    _watch_system(config, tracker, resumed=False)
    return tracker


def _watch_system(config: RunConfig, tracker: MLflowTracker, resumed: bool) -> None:
    if config.tracking.system_metrics:
        tracker.watch_system(resumed, config.tracking.system_metrics_seconds)


def _saved_mlflow_run(plan: RunPlan) -> dict | None:
    if plan.checkpoint is not None:
        return plan.checkpoint.state["mlflow"]
    path = plan.run_dir / MLFLOW_RUN
    return json.loads(path.read_text()) if path.is_file() else None
