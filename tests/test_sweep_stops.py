"""A sweep stopped at any moment of a trial's end trains its grid point once (issue 52).

A trial's end is written in an order (rollverify/training/run_end.py: the last checkpoint,
summary.json, the MLflow run's artifacts and FINISHED; then Tune is told). A resumed sweep
used to train again a point whose run had finished when the stop fell between two of these
writes. Here a grid point's trial (sweep.train_point, what each Tune trial runs) is SIGKILLed
at each of them in turn (named kill points, rollverify/infra/kill_points.py), and called again as
a resumed sweep's Tune calls it: the point ends with one run folder and one MLflow run,
FINISHED, with the summary the run would have written. The sweep on Ray, stopped by signals
to its process group at a random moment of a trial's end: test_orchestration.py.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from rollverify.config import load_config
from rollverify.experiments.child_runs import open_parent, run_folder_of
from rollverify.experiments.sweep import train_point
from rollverify.infra.nested_dicts import config_fields
from rollverify.training.checkpoint.files import latest
from tests.cli import call_in_process, run_cli, start_in_process
from tests.runs import tiny

# Each test trains one run of 2 steps (a few seconds) and calls its trial a few more times.
pytestmark = pytest.mark.slow

STEPS = 2
FIELDS = ["verify.ds", "train.seed"]  # the grid's field and the seed, as Tune's params
KILLED = -9


def sweep_folder(tmp_path: Path) -> tuple[dict, str, Path, str]:
    """A sweep's parent run and folder, and the base config of its trials (as sweep.sweep
    builds them): (base, parent run id, folder, store)."""
    config = tiny(tmp_path, "rollverify", **{"train.steps": STEPS, "train.checkpoint_every": 1})
    tags = {"sweep_params": "verify.ds", "method": "rollverify"}
    parent, folder, uri = open_parent(config, "sweep", "sweep-ds", tags)
    base = config_fields(config.to_dict()) | {"output": str(folder), "tracking.uri": uri}
    return base, parent.run_id, folder, uri


def trial(base: dict, seed: int, parent_run_id: str) -> None:
    """The trial of grid point ds=0.01 with `seed` (sweep.run_trial, less Tune's report)."""
    config = load_config(overrides=base | {"verify.ds": 0.01, "train.seed": seed})
    train_point(config, FIELDS, parent_run_id)


def the_run(folder: Path, uri: str, parent_run_id: str, seed: int) -> tuple[Path, object]:
    """The point's one run folder and one MLflow run (the test fails if there are more)."""
    folders = [
        f.parent
        for f in folder.glob("*/config.yaml")
        if yaml.safe_load(f.read_text())["train"]["seed"] == seed
    ]
    client = MlflowClient(uri)
    experiment = client.get_run(parent_run_id).info.experiment_id
    query = f"tags.mlflow.parentRunId = '{parent_run_id}' and tags.seed = '{seed}'"
    runs = client.search_runs([experiment], filter_string=query)
    assert len(folders) == 1 and len(runs) == 1, (folders, [r.info.status for r in runs])
    return folders[0], runs[0]


def steps_logged(uri: str, run_id: str) -> list[int]:
    return sorted(m.step for m in MlflowClient(uri).get_metric_history(run_id, "reward_mean"))


# (the long tier, make test-all: make test stays under 10 minutes on 2 cores)
@pytest.mark.long
def test_a_point_stopped_at_each_write_of_its_end_is_trained_once(tmp_path):
    base, parent_run_id, folder, uri = sweep_folder(tmp_path)
    # The last checkpoint half written: the resumed run trains step 2 again, in its folder.
    assert call_in_process(trial, base, 0, parent_run_id, kill_at="checkpoint-write:2") == KILLED
    run_dir, run = the_run(folder, uri, parent_run_id, 0)
    assert latest(run_dir / "checkpoints").step == 1 and run.info.status == "RUNNING"
    # The last checkpoint written, no summary.json: the end is completed, not trained again.
    assert call_in_process(trial, base, 0, parent_run_id, kill_at="end-summary:2") == KILLED
    assert the_run(folder, uri, parent_run_id, 0)[0] == run_dir
    assert latest(run_dir / "checkpoints").step == STEPS
    assert not (run_dir / "summary.json").exists()
    # summary.json rebuilt from the run's records, the MLflow run not closed (by `rvctl
    # resume`, which completes a cut-off end the same way before it says the run is finished).
    resumed = run_cli("resume", str(run_dir), kill_at="end-mlflow:2")
    assert resumed.returncode == KILLED, resumed.stderr[-2000:]
    _, run = the_run(folder, uri, parent_run_id, 0)
    assert (run_dir / "summary.json").is_file() and run.info.status == "RUNNING"
    # Closed; then called again, as Tune reruns a trial whose end it was not told of.
    for _ in range(2):
        assert call_in_process(trial, base, 0, parent_run_id) == 0
        _, run = the_run(folder, uri, parent_run_id, 0)
        assert run.info.status == "FINISHED"
    assert steps_logged(uri, run.info.run_id) == [1, 2, 2]  # step 2: before and after the kill
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run_id"] == run.info.run_id and summary["steps"] == STEPS
    stored = {a.path for a in MlflowClient(uri).list_artifacts(run.info.run_id)}
    assert {"config.yaml", "ledger.json", "summary.json"} <= stored


@pytest.mark.long
def test_a_finished_run_missing_its_summary_is_kept_and_the_summary_rebuilt(tmp_path):
    base, parent_run_id, folder, uri = sweep_folder(tmp_path)
    # Killed after the run wrote its summary, before it closed its MLflow run.
    assert call_in_process(trial, base, 1, parent_run_id, kill_at="end-mlflow:2") == KILLED
    run_dir, run = the_run(folder, uri, parent_run_id, 1)
    written = (run_dir / "summary.json").read_text()
    assert run.info.status == "RUNNING"
    assert call_in_process(trial, base, 1, parent_run_id) == 0
    _, run = the_run(folder, uri, parent_run_id, 1)
    assert run.info.status == "FINISHED" and (run_dir / "summary.json").read_text() == written
    # A FINISHED MLflow run whose folder lost its summary.json: kept, its summary rebuilt.
    (run_dir / "summary.json").unlink()
    assert call_in_process(trial, base, 1, parent_run_id) == 0
    _, run = the_run(folder, uri, parent_run_id, 1)
    assert run.info.status == "FINISHED" and steps_logged(uri, run.info.run_id) == [1, 2]
    original = json.loads(written)
    rebuilt = json.loads((run_dir / "summary.json").read_text())
    assert rebuilt.keys() == original.keys()
    for name, value in original.items():
        if name != "wall_seconds":  # rebuilt: the MLflow run's start to its last log
            assert _same(rebuilt[name], value), (name, rebuilt[name], value)
    assert 0 < rebuilt["wall_seconds"] < 600


def test_a_trial_waits_for_a_process_still_on_its_run_and_keeps_it(tmp_path):
    """A stopped sweep's trial may outlive the sweep (Ray runs each worker in a process group
    of its own: a SIGKILL of the sweep's group reaches it only when it sees its raylet gone, a
    tiny trial was seen training 11 more steps) and still be training when the point's trial
    runs again: the new trial waits for it, then keeps the run it finished."""
    base, parent_run_id, folder, uri = sweep_folder(tmp_path)
    orphan = start_in_process(trial, base, 2, parent_run_id)
    deadline = time.monotonic() + 120
    while not list(folder.glob("*/checkpoints/step-000000")) and time.monotonic() < deadline:
        time.sleep(0.05)  # training: its folder, config, lock and MLflow run made
    assert orphan.is_alive(), "the first trial should still be training"
    assert call_in_process(trial, base, 2, parent_run_id) == 0
    orphan.join(timeout=120)
    assert orphan.exitcode == 0
    _, run = the_run(folder, uri, parent_run_id, 2)
    assert run.info.status == "FINISHED" and steps_logged(uri, run.info.run_id) == [1, 2]


def test_of_two_runs_of_a_point_the_one_with_a_summary_is_taken(tmp_path):
    """A sweep of older code may have left a grid point two run folders (one abandoned when
    the point was trained anew): a resumed trial goes on with the one that finished."""
    point = {"train.method": "rollverify", "train.seed": 0, "verify.ds": 0.01}
    config = {"train": {"method": "rollverify", "seed": 0}, "verify": {"ds": 0.01, "dt": 2.0}}
    for name in ("rollverify-s0-1-abandoned", "rollverify-s0-2-finished", "rollverify-s0-3"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(yaml.safe_dump(config))
    other = config | {"verify": {"ds": 0.05, "dt": 2.0}}
    (tmp_path / "rollverify-s0-0-other" / "config.yaml").parent.mkdir()
    (tmp_path / "rollverify-s0-0-other" / "config.yaml").write_text(yaml.safe_dump(other))
    assert run_folder_of(tmp_path, point) == tmp_path / "rollverify-s0-1-abandoned"
    (tmp_path / "rollverify-s0-2-finished" / "summary.json").write_text("{}")
    assert run_folder_of(tmp_path, point) == tmp_path / "rollverify-s0-2-finished"
    assert run_folder_of(tmp_path, point | {"train.seed": 1}) is None


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b
