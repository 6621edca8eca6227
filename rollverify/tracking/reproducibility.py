"""What two runs of one seed must share exactly (a resumed run and its uninterrupted twin, one
commit's runs and another's): every logged metric but the clocks'. Read by the tests of exact
resume and by benchmarks/runs_unchanged.py."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

TIMINGS = {
    "rollout_seconds",
    "train_seconds",
    "sync_seconds",
    "verify_seconds",
    "measure_seconds",
    "device_seconds",
    "trl/step_time",  # TRL's own timing of the step
}


def metric_history(tracking_uri: str, run_id: str) -> dict[str, dict[int, float]]:
    """Every metric a run logged: {name: {step: value}}."""
    client = MlflowClient(tracking_uri)
    return {
        name: {m.step: m.value for m in client.get_metric_history(run_id, name)}
        for name in client.get_run(run_id).data.metrics
    }


def comparable(metrics: dict) -> dict:
    """Metrics that two runs of one seed must share exactly: all but timings and the cost
    ledger's seconds (its token counts stay)."""
    return {
        name: values
        for name, values in metrics.items()
        if name not in TIMINGS
        and not (name.startswith("cost_") and "seconds" in name)
        and name not in ("cost_device_days", "cost_gpu_days")
    }
