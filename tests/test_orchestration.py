"""rvctl compare and rvctl sweep end to end: real training runs, real MLflow, real Ray Tune."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from benchmarks.ray_cluster import LOCAL_RAY_SETTINGS, ray_cluster
from rollverify.config import load_config
from rollverify.experiments.compare import compare
from rollverify.training.run import train
from tests.cli import run_rvctl
from tests.runs import comparable, history, metric_history, tiny_file
from tests.sockets import beyond_loopback, listening, token_readable_by_others, tree

RVCTL = [sys.executable, "-m", "rvctl.app"]


def tiny_config(tmp_path: Path, **overrides) -> Path:
    """The tiny run (tests/runs.py) in 2 steps, as a config file: a few seconds per run."""
    return tiny_file(tmp_path / "tiny.yaml", **{"train.steps": 2} | overrides)


def children(uri: str, parent_run_id: str) -> list:
    client = MlflowClient(uri)
    parent = client.get_run(parent_run_id)
    return client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'"
    )


def last(uri: str, run_id: str, metric: str) -> float:
    history = MlflowClient(uri).get_metric_history(run_id, metric)
    return max(history, key=lambda m: m.step).value


@pytest.mark.slow
def test_compare_runs_every_method_under_one_parent_and_reports_it(tmp_path, monkeypatch, capsys):
    command = ["compare", "grpo", "rollverify", "--seeds", "1"]
    command += ["--config", str(tiny_config(tmp_path)), "--output", str(tmp_path), "-f", "json"]
    result = run_rvctl(command, monkeypatch, capsys)  # in this process: no second import
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {row["method"]: row for row in json.loads(result.stdout)}
    assert list(rows) == ["grpo", "rollverify"]
    # stderr is not a terminal here (nor in a cluster's log): a line per step, one per run done
    logged = result.stderr.splitlines()
    for name in ("grpo/s0", "rollverify/s0"):
        steps = [line for line in logged if line.startswith(f"{name} step ")]
        assert [line.split()[2] for line in steps] == ["0/2", "1/2", "2/2"], logged  # 0: eval
        assert "reward" in steps[-1] and steps[-1].endswith(" s")
        assert f"{name} finished" in logged
    (folder,) = tmp_path.glob("compare-*")
    parent = json.loads((folder / "parent.json").read_text())
    uri = parent["tracking_uri"]
    runs = {r.data.tags["method"]: r for r in children(uri, parent["run_id"])}
    assert sorted(runs) == ["grpo", "rollverify"]
    assert MlflowClient(uri).get_run(parent["run_id"]).info.status == "FINISHED"
    for method, run in runs.items():
        assert run.info.status == "FINISHED"
        row = rows[method]
        assert row["seeds"] == 1
        assert row["eval_accuracy_mean"] == pytest.approx(
            last(uri, run.info.run_id, "eval_accuracy")
        )
        assert row["device_days"] == pytest.approx(last(uri, run.info.run_id, "cost_device_days"))
        assert row["device_days"] > 0
    assert rows["grpo"]["device_speedup_vs_grpo"] == pytest.approx(1.0)
    # The parent run holds the report: its rows as a table, headline figures, the curves
    client = MlflowClient(uri)
    parent_run = client.get_run(parent["run_id"])
    for method, row in rows.items():
        logged = parent_run.data.metrics[f"{method}/eval_accuracy_mean"]
        assert logged == pytest.approx(row["eval_accuracy_mean"])
    stored = {a.path for a in client.list_artifacts(parent["run_id"])}
    assert {"report.json", "plots"} <= stored
    table = json.loads(Path(client.download_artifacts(parent["run_id"], "report.json")).read_text())
    assert [r[table["columns"].index("method")] for r in table["data"]] == list(rows)
    plots = {Path(a.path).name for a in client.list_artifacts(parent["run_id"], "plots")}
    assert "reward_mean.png" in plots
    # every run says what code, command and libraries made it
    for run in [parent_run, *runs.values()]:
        tags = run.data.tags
        assert len(tags["mlflow.source.git.commit"]) == 40 and tags["git_dirty"] in (
            "true",
            "false",
        )
        assert tags["mlflow.source.type"] == "LOCAL" and "compare" in tags["command"]
        for package in ("torch", "transformers", "trl", "mlflow", "ray"):
            assert tags[f"version.{package}"], package
    assert rows["grpo"]["acceptance_rate_final"] is None  # grpo does not verify
    assert 0 <= rows["rollverify"]["acceptance_rate_final"] <= 1
    # gone on with (finished: nothing trains again), with its frontier against grpo after it
    again = command[:-2] + ["--compare-dir", str(folder), "--frontier"]
    shown = run_rvctl(again, monkeypatch, capsys)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "cost-accuracy frontier against grpo" in shown.stdout and "Pareto" in shown.stdout
    assert len(list(children(uri, parent["run_id"]))) == 2
    # the ledger is stored with each run, and matches what was logged
    for run in runs.values():
        ledger = json.loads((Path(run.data.tags["run_dir"]) / "ledger.json").read_text())
        assert ledger["device_days"] == pytest.approx(
            last(uri, run.info.run_id, "cost_device_days")
        )
    # The second child ran on the engine the first one used: it must be the run a standalone
    # `rvctl train` of the same (method, seed) would have been.
    alone = train(
        load_config(tiny_config(tmp_path), {"train.method": "rollverify", "output": str(tmp_path)})
    )
    child = metric_history(uri, runs["rollverify"].info.run_id)
    assert comparable(child) == comparable(history(alone))


def test_a_stopped_local_ray_leaves_the_process_as_a_users_shell(monkeypatch):
    """ray.init() of a new local Ray turns token mode on in its process for good
    (RAY_AUTH_MODE=token): once rvctl's local Ray stops, what the process starts next (a `ray
    start`, which would then demand a token file; a client of a cluster) gets the user's own
    settings again."""
    from ray._private.authentication.authentication_token_setup import (
        enable_token_auth_by_default,
    )

    from rollverify.rollout.engines import ray_runtime

    for name in LOCAL_RAY_SETTINGS:  # (absent now and again after the test)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    ray_runtime._enter_private_mode()
    enable_token_auth_by_default()  # what ray.init() does for a new local Ray
    assert {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN"} <= set(os.environ)
    ray_runtime._leave_private_mode()
    assert not set(LOCAL_RAY_SETTINGS) & set(os.environ)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.long  # 70 s: make test-all (make test was at 10 minutes, 2026-12-06)
def test_compare_and_sweep_on_a_ray_cluster_run_there_side_by_side(tmp_path):
    # 24 steps (~10 s a run alone): two runs side by side overlap by more than the spread of
    # their workers' start-up (with 1 step one started 47 ms after the other ended; with 3
    # steps, 1.9 s a run on a faster machine, one started 81 ms after: a 2 s spread; with 8,
    # 3.4 s a run beside the rest of the suite, one started 68 ms after: a 3.5 s spread)
    config_file = tiny_config(tmp_path, **{"train.steps": 24})
    command = [*RVCTL, "compare", "grpo", "rollverify", "--config", str(config_file)]
    command += ["--output", str(tmp_path / "runs"), "-f", "json"]
    # A user's shell (no local Ray's settings), connecting as Ray's docs have clients do.
    with ray_cluster(tmp_path / "head.log", cpus=2) as (address, token):  # a trial: 1 CPU
        result = subprocess.run(
            [*command, "--address", address], capture_output=True, text=True, env=token
        )
        failed = _failing_sweep(tmp_path, address, token)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [row["method"] for row in json.loads(result.stdout)] == ["grpo", "rollverify"]
    (folder,) = (tmp_path / "runs").glob("compare-*")
    parent = json.loads((folder / "parent.json").read_text())
    uri = parent["tracking_uri"]
    assert MlflowClient(uri).get_run(parent["run_id"]).info.status == "FINISHED"
    grpo, rollverify = sorted(children(uri, parent["run_id"]), key=lambda r: r.data.tags["method"])
    assert grpo.info.status == rollverify.info.status == "FINISHED"
    # Side by side: each started before the other ended (in one process they run in turn).
    assert grpo.info.start_time < rollverify.info.end_time
    assert rollverify.info.start_time < grpo.info.end_time
    # A sweep trial on the cluster that fails at its first reward: the sweep names its grid
    # point with the trial's own error (no Ray or Tune traceback), exit 2 (the reward is the
    # user's input).
    reward = tmp_path / "nan_reward.py"
    assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr[-3000:]
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error: ")]
    assert [e.split(" for the response")[0] for e in errors] == [
        f"error: trial ds=0.01 seed=0: task.reward {reward}:score returned nan"
    ]
    # No cluster there any more: refused in seconds naming the option, nothing written.
    config = load_config(tiny_config(tmp_path), {"output": str(tmp_path / "again")})
    with pytest.raises(ValueError, match="--address: no Ray cluster answers at"):
        compare(config, ["grpo"], address=address)
    assert not (tmp_path / "again").exists()


def _run_folders(output: Path, steps: int | None = None) -> Iterator[Path]:
    """The run folders of the sweep in `output` (of `steps` steps)."""
    for config in output.glob("sweep-*/*/config.yaml"):
        if steps is None or _steps(config.parent) == steps:
            yield config.parent


def _steps(run_dir: Path) -> int:
    return yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["steps"]


def _run_ends(folder: Path, uri: str) -> list[tuple]:
    """Where each run of a sweep's folder is: newest checkpoint, summary.json, MLflow status."""
    ends = []
    for run_dir in sorted(p.parent for p in folder.glob("*/config.yaml")):
        steps = sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))
        record = run_dir / "mlflow.json"
        run_id = json.loads(record.read_text())["run_id"] if record.is_file() else None
        status = MlflowClient(uri).get_run(run_id).info.status if run_id else None
        ends.append((_steps(run_dir), steps[-1:], (run_dir / "summary.json").is_file(), status))
    return ends


def _failing_sweep(tmp_path: Path, address: str, env: dict) -> subprocess.CompletedProcess:
    """`rvctl sweep ds` of one grid point on the cluster, with a reward that returns nan."""
    reward = tmp_path / "nan_reward.py"
    reward.write_text("def score(response, answer):\n    return float('nan')\n")
    config = tiny_file(tmp_path / "nan.yaml", **{"task.reward": f"{reward}:score"})
    command = [*RVCTL, "sweep", "ds", "--ds", "0.01", "--config", str(config)]
    command += ["--steps", "1", "--output", str(tmp_path / "sweep"), "--address", address]
    return subprocess.run(command, capture_output=True, text=True, env=env)


def test_compare_refuses_an_unknown_method_before_any_work(tmp_path):
    result = subprocess.run(
        [*RVCTL, "compare", "grpo", "rollverfy", "--output", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "unknown rollverfy" in result.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.long  # 79 s: make test-all (two Ray nodes' fast test took its room, 2026-12-07)
def test_sweep_on_ray_resumes_without_rerunning_finished_trials(tmp_path):
    """Two trials side by side (a core each), one of 1 step and one of 32 (a Ray worker may start
    seconds after the other, and train on for ~3 s after its sweep is killed: the long trial
    outlasts both), in a process group of the sweep's
    own, as a job's. Stopped as a scheduler stops a job, SIGTERM then SIGKILL to the whole
    group, at a random moment of the short trial's run and end (its step, its last checkpoint,
    its summary, its MLflow run's end, Tune's record of it: this end takes tens of ms,
    tests/test_sweep_stops.py stops a trial at each of its writes in turn; and its worker dies
    before Tune's record), the other in the middle of its run; then resumed: each grid point
    has one run folder and one MLflow run, FINISHED (each kept, its end completed, or
    resumed), and the report counts each once. (`--dt 2` is the config's 2.0: a resumed trial
    must still find its run.)"""
    command = [*RVCTL, "sweep", "ds", "dt", "train.steps", "--ds", "0.01", "--dt", "2"]
    config = tiny_config(tmp_path, **{"train.checkpoint_every": 4})  # resumed: little to redo
    command += ["--train.steps", "1,32", "--config", str(config)]
    command += ["--output", str(tmp_path)]
    # The short trial's worker dies once its run is closed, before Tune is told (a stop after
    # that leaves Tune's state ERROR: resumed, Tune runs it again and it must keep its run).
    kill = os.environ | {"ROLLVERIFY_KILL_AT": "end-tune:1"}
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=kill,
    )
    seed = time.time_ns()
    delay = random.Random(seed).uniform(0.0, 1.5)  # the short trial's 1 step and end: ~1 s
    where = f"stopped {delay:.2f} s after the short trial's first checkpoint (seed {seed})"
    deadline = time.monotonic() + 400
    short, started = None, False  # the short trial's run folder; its first checkpoint
    while time.monotonic() < deadline and process.poll() is None and not started:
        time.sleep(0.05)
        short = short or next(_run_folders(tmp_path, steps=1), None)
        started = short is not None and (short / "checkpoints" / "step-000000").is_dir()
    assert started, process.communicate()[1][-3000:] if process.poll() is not None else "timeout"
    processes = tree(process.pid)  # a trial is training: every server of the sweep is up
    sockets = listening(processes)
    time.sleep(delay)
    assert process.poll() is None, "the sweep should still be running its longer trial"
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.communicate(timeout=2)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    with contextlib.suppress(ProcessLookupError):  # Ray's processes of the group, if any left
        os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode != 0, where
    # A local sweep listens on loopback only, and its Ray token is the user's alone.
    assert sockets and not beyond_loopback(sockets), beyond_loopback(sockets)
    assert token_readable_by_others(processes) is None
    short_run = json.loads((short / "mlflow.json").read_text())["run_id"]
    (parent_file,) = tmp_path.glob("sweep-*/parent.json")
    parent = json.loads(parent_file.read_text())
    uri = parent["tracking_uri"]
    where += f"; the runs when resumed: {_run_ends(parent_file.parent, uri)}"
    print(where)  # (pytest -s or -rP: where this stop left the runs)

    result = subprocess.run([*command, "--resume", "-f", "json"], capture_output=True, text=True)
    assert result.returncode == 0, f"{where}\n{result.stderr[-3000:]}"
    # Each grid point: one run folder, one MLflow run, FINISHED.
    points = sorted(_steps(f) for f in _run_folders(tmp_path))
    runs = children(uri, parent["run_id"])
    done = [r for r in runs if r.info.status == "FINISHED"]
    statuses = [(r.data.params["train.steps"], r.info.status) for r in runs]
    assert points == [1, 32] and len(runs) == len(done) == 2, f"{points}, {statuses}; {where}"
    assert short_run in {r.info.run_id for r in done}, where
    # its stderr is a pipe (a job's log): a line when a trial finishes, not one per poll
    finished_lines = [line for line in result.stderr.splitlines() if "trials finished" in line]
    assert finished_lines and finished_lines[-1].startswith(
        "sweep ds x dt x train.steps: 2/2 trials finished"
    )
    counts = [line.split(": ")[1].split()[0] for line in finished_lines]
    assert len(counts) == len(set(counts)), finished_lines
    rows = json.loads(result.stdout)
    assert sorted(row["steps"] for row in rows) == [1, 32]
    assert [(row["seeds"], row["unfinished"], row["duplicates"]) for row in rows] == [(1, 0, 0)] * 2
    for row in rows:
        (run,) = [r for r in done if int(r.data.params["train.steps"]) == row["steps"]]
        assert row["eval_accuracy_mean"] == pytest.approx(
            last(uri, run.info.run_id, "eval_accuracy")
        )
    assert MlflowClient(uri).get_run(parent["run_id"]).info.status == "FINISHED"
    # the resumed parent holds the grid's report: a headline figure per grid point, the table
    parent_run = MlflowClient(uri).get_run(parent["run_id"])
    for row in rows:
        name = f"ds_{row['ds']}-dt_{row['dt']}-steps_{row['steps']}/eval_accuracy_mean"
        assert parent_run.data.metrics[name] == pytest.approx(row["eval_accuracy_mean"])
    stored = MlflowClient(uri).list_artifacts(parent["run_id"])
    assert "report.json" in {a.path for a in stored}
