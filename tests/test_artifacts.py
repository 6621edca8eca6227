"""What a run leaves on its MLflow run beside the metrics: the resolved config, the ledger,
the summary and its curves as artifacts; and `rvctl report RUN_DIR` reads the run folder
(the command line's own path through load_report is tested with compare folders)."""

from __future__ import annotations

import json
from pathlib import Path

from mlflow.tracking import MlflowClient

from rollverify.tracking.run_records import load_report
from rollverify.training.checkpoint.files import latest
from rollverify.training.cost_settings import memory_estimate
from rollverify.training.run import train
from tests.runs import tiny


def test_a_run_stores_its_config_ledger_summary_and_curves_and_reports_from_its_folder(tmp_path):
    config = tiny(tmp_path, "rollverify", **{"train.steps": 2, "tracking.plots": True})
    summary = train(config)
    client = MlflowClient(summary.tracking_uri)
    stored = {a.path for a in client.list_artifacts(summary.run_id)}
    assert {"config.yaml", "ledger.json", "summary.json", "plots"} <= stored
    plots = {Path(a.path).name for a in client.list_artifacts(summary.run_id, "plots")}
    assert {"reward_mean.png", "eval_accuracy.png", "acceptance_rate.png"} <= plots
    local = Path(client.download_artifacts(summary.run_id, "ledger.json", str(tmp_path / "dl")))
    assert json.loads(local.read_text()) == json.loads(
        (Path(summary.run_dir) / "ledger.json").read_text()
    )
    assert (Path(summary.run_dir) / "plots" / "reward_mean.png").stat().st_size > 1000
    # the dry run's checkpoint-size estimate (cost/memory_estimate.py), against this run's
    folder = latest(Path(summary.run_dir) / "checkpoints").folder
    written = sum(p.stat().st_size for p in folder.rglob("*.safetensors"))
    assert 0.9 < written / memory_estimate(config).checkpoint_bytes < 1.1

    report = load_report([summary.run_dir])  # what `rvctl report RUN_DIR` reads
    assert [run.run_id for run in report.runs] == [summary.run_id]
