"""`rvctl train --no-eval` (train.evaluate: false): a smoke run evaluates nothing, not even the
base model, and its report says there is no accuracy rather than failing."""

from __future__ import annotations

import pytest

from tests.cli import run_rvctl
from tests.runs import metric_history, tiny_file


@pytest.mark.slow
def test_a_smoke_run_evaluates_nothing_and_reports_without_accuracy(tmp_path, monkeypatch, capsys):
    config = tiny_file(tmp_path / "tiny.yaml", **{"train.steps": 2, "train.eval_every": 1})
    trained = run_rvctl(["train", "-c", str(config), "--no-eval", "--output",
                         str(tmp_path / "runs"), "-f", "json"], monkeypatch, capsys)  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    import json

    summary = json.loads(trained.stdout)[0]
    history = metric_history(summary["tracking_uri"], summary["run_id"])
    assert "eval_accuracy" not in history and "reward_mean" in history
    step = next(line for line in trained.stderr.splitlines() if " step 1/2 " in line)
    for figure in ("loss ", "grad ", "len ", "tok/s", "left "):  # the plain line, from TRL's logs
        assert figure in step, step
    report = run_rvctl(["report", str(tmp_path / "runs")], monkeypatch, capsys)
    assert report.returncode == 0, report.stderr
