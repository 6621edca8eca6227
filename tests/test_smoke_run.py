"""A smoke run as a TRL user starts one: `rvctl train --no-eval` (train.evaluate: false)
evaluates nothing, not even the base model, and its report says there is no accuracy rather
than failing; its plain step line carries TRL's figures; `tracking.report_to: [tensorboard]`
writes TRL's logs as TensorBoard event files beside MLflow (read back here as TensorBoard
reads them: TFRecords of Event protos)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.cli import run_rvctl
from tests.runs import metric_history, tiny_file


@pytest.mark.slow
def test_a_smoke_run_evaluates_nothing_logs_to_tensorboard_and_reports_without_accuracy(
    tmp_path, monkeypatch, capsys
):
    config = tiny_file(tmp_path / "tiny.yaml", **{"train.steps": 2, "train.eval_every": 1})
    trained = run_rvctl(["train", "-c", str(config), "--no-eval", "--output",
                         str(tmp_path / "runs"), "--set", "tracking.report_to=[tensorboard]",
                         "-f", "json"], monkeypatch, capsys)  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    import json

    summary = json.loads(trained.stdout)[0]
    history = metric_history(summary["tracking_uri"], summary["run_id"])
    assert "eval_accuracy" not in history and "reward_mean" in history
    step = next(line for line in trained.stderr.splitlines() if " step 1/2 " in line)
    for figure in ("loss ", "grad ", "len ", "tok/s", "left "):  # the plain line, from TRL's logs
        assert figure in step, step
    (events,) = (Path(summary["run_dir"]) / "trl" / "runs").glob("*/events.out.tfevents.*")
    scalars = tensorboard_scalars(events)
    assert {1, 2} <= scalars["train/loss"] and {1, 2} <= scalars["train/grad_norm"]
    report = run_rvctl(["report", str(tmp_path / "runs")], monkeypatch, capsys)
    assert report.returncode == 0, report.stderr


def tensorboard_scalars(path: Path) -> dict[str, set[int]]:
    """tag -> the steps it was written at: the file's records (length, its CRC, the Event,
    the Event's CRC)."""
    from tensorboardX.proto import event_pb2

    data, at, found = path.read_bytes(), 0, {}
    while at < len(data):
        (size,) = struct.unpack("<Q", data[at : at + 8])
        event = event_pb2.Event.FromString(data[at + 12 : at + 12 + size])
        at += 12 + size + 4
        for value in event.summary.value:
            found.setdefault(value.tag, set()).add(event.step)
    return found
