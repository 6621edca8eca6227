"""Checkpoints and `rvctl resume`: a run killed anywhere continues to the same end.

(Stopping by SIGTERM / Ctrl-C, with the rollout in flight saved and resumed: the vLLM CLI test
in test_vllm_engine.py.)

The kill test is the issue's: on CPU with the hf engine and a fixed seed, a run SIGKILLed
during the first rollout (before any periodic checkpoint), during training and while writing
a checkpoint (after logging its step), and resumed each time, ends with the same weights,
optimizer, cache and logged metrics (timings aside) as a run that never stopped. Kills are
real SIGKILLs at named points (rollverify/infra/kill_points.py), so each hits the moment it names.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from rollverify.config import ConfigError, load_config
from rollverify.cost import trace
from rollverify.training.checkpoint.files import check, folder_for, latest
from rollverify.training.run import resume, train
from tests.cli import run_cli, run_rvctl
from tests.runs import tiny_file

# Every test trains a run of 3 to 6 steps and resumes it (or needs the reference run): the
# kill test ~130 s here, the others 13-18 s each.
pytestmark = pytest.mark.slow

STEPS = 6
# The tiny run (tests/runs.py), with a cache to lose: rollverify (partial rollout pauses
# trajectories every step), evaluations and checkpoints in the middle.
SETTINGS = {
    "train.method": "rollverify",
    "train.steps": STEPS,
    "train.eval_every": 3,
    "train.checkpoint_every": 2,
}
TIMING = ("_seconds", "cost_", "trl/step_time")  # wall-clock figures differ between any two runs


def config_file(folder: Path) -> Path:
    return tiny_file(folder / "tiny.yaml", **SETTINGS)


def logged(uri: str, run_id: str) -> dict[str, dict[int, list[float]]]:
    """Every value logged per metric and step (a step logged twice holds two)."""
    client = MlflowClient(uri)
    values: dict[str, dict[int, list[float]]] = {}
    for name in client.get_run(run_id).data.metrics:
        for metric in client.get_metric_history(run_id, name):
            values.setdefault(name, {}).setdefault(metric.step, []).append(metric.value)
    return values


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The run that never stopped (in-process; the same threads and seed as the CLI runs)."""
    folder = tmp_path_factory.mktemp("reference")
    config = load_config(config_file(folder), {"output": str(folder)})
    return train(config)


def test_killed_at_three_points_and_resumed_ends_like_an_uninterrupted_run(
    tmp_path, reference, monkeypatch, capsys
):
    output = tmp_path / "runs"
    config = str(config_file(tmp_path))
    # Killed as it starts: folder, config and MLflow run made, no checkpoint yet. Resumed
    # from step 0 in the same folder and MLflow run (named by the output folder it is in).
    first = run_cli("train", "--config", config, "--output", str(output), kill_at="setup:0")
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    (run_dir,) = output.glob("rollverify-s0-*")
    checkpoints = run_dir / "checkpoints"
    assert latest(checkpoints) is None and (run_dir / "mlflow.json").is_file()
    # Killed in the first rollout, before any periodic checkpoint: the one taken as training
    # starts (step 0) is there.
    second = run_cli("resume", str(output), kill_at="rollout:1#10")
    assert second.returncode == -signal.SIGKILL, second.stderr[-2000:]
    assert list(output.glob("rollverify-s0-*")) == [run_dir]
    assert latest(checkpoints).step == 0

    # Resumed each time from the newest good checkpoint; killed further on at each point.
    for kill_at, newest_good in [("train:3", 2), ("checkpoint-write:4", 2)]:
        result = run_cli("resume", str(run_dir), kill_at=kill_at)
        assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
        if kill_at.startswith("checkpoint-write"):  # died with a half-written checkpoint
            assert list(checkpoints.glob(".tmp-step-000004-*"))
            assert not folder_for(checkpoints, 4).exists()
        assert latest(checkpoints).step == newest_good
    # The killed process logged steps past its newest good checkpoint: the resume trains them
    # again, and must not log them twice.
    mlflow_run = json.loads((run_dir / "mlflow.json").read_text())
    logged_before = logged(mlflow_run["tracking_uri"], mlflow_run["run_id"])
    assert max(logged_before["reward_mean"]) > newest_good
    final = run_cli("resume", str(run_dir))
    assert final.returncode == 0, final.stderr[-3000:]
    # Its stderr is a pipe, not a terminal (a cluster's log): a plain line per step it trained
    lines = [line.split() for line in final.stderr.splitlines() if " step " in line]
    trained = [words for words in lines if words[2] != f"{newest_good}/{STEPS}"]
    assert [words[:3] for words in trained] == [
        [run_dir.name, "step", f"{step}/{STEPS}"] for step in range(newest_good + 1, STEPS + 1)
    ]
    # reward, the step's seconds, then the time left (none on the last step)
    assert all("reward" in words and "s" in words[-3:] for words in trained)
    assert [words[-2] == "left" for words in trained] == [True] * (len(trained) - 1) + [False]
    assert not list(checkpoints.glob(".tmp-*"))
    # A script that always resumes: a finished run says so, exit 0, and nothing changes.
    saved = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    again = run_rvctl(["resume", str(run_dir)], monkeypatch, capsys)  # (in this process)
    assert again.returncode == 0 and "is finished" in again.stdout, again.stderr[-2000:]
    assert "--steps N" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == saved

    ours, theirs = latest(checkpoints), latest(Path(reference.run_dir) / "checkpoints")
    assert ours.step == theirs.step == STEPS
    for group in ("model", "optimizer", "cache"):  # bit for bit
        assert ours.tensors[group].keys() == theirs.tensors[group].keys()
        for name, tensor in theirs.tensors[group].items():
            assert torch.equal(ours.tensors[group][name], tensor), f"{group}.{name}"
    for part in ("cache", "answers", "task", "monitor"):
        assert ours.state[part] == theirs.state[part], part
    assert ours.state["ledger"]["tokens"] == theirs.state["ledger"]["tokens"]
    assert ours.state["ledger"]["modeled_seconds"] == theirs.state["ledger"]["modeled_seconds"]
    assert len(ours.state["cache"]) > 0, "the test must have a cache to lose"
    for kind in ("engine", "trainer"):  # every step traced once, as the reference traced it
        ours_, theirs_ = (trace.read(d / "trace", kind) for d in (run_dir, Path(reference.run_dir)))
        if kind == "engine":  # all but the timings
            ours_, theirs_ = ours_.drop_columns(["seconds"]), theirs_.drop_columns(["seconds"])
        assert ours_.equals(theirs_), kind

    # One MLflow run, finished; every value logged once, the reference's.
    run_id = ours.state["mlflow"]["run_id"]
    client = MlflowClient(ours.state["mlflow"]["tracking_uri"])
    assert client.get_run(run_id).info.status == "FINISHED"
    assert len(client.search_runs([client.get_run(run_id).info.experiment_id])) == 1
    got = logged(client.tracking_uri, run_id)
    expected = logged(reference.tracking_uri, reference.run_id)
    assert got.keys() == expected.keys()
    for name, steps in expected.items():
        assert got[name].keys() == steps.keys(), name
        assert all(len(values) == 1 for values in got[name].values()), (name, got[name])
        if not any(part in name for part in TIMING):
            assert got[name] == steps, name


def test_a_damaged_newest_checkpoint_is_skipped_with_a_warning(tmp_path):
    config = load_config(
        config_file(tmp_path),
        {"output": str(tmp_path), "train.steps": 3, "train.checkpoint_every": 1},
    )
    summary = train(config)
    checkpoints = Path(summary.run_dir) / "checkpoints"
    newest = folder_for(checkpoints, 3) / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[:-100])  # truncated, as a full disk leaves it
    with pytest.warns(UserWarning, match="step-000003.*checksum"):
        resumed = resume(summary.run_dir, {"train.steps": 4})
    assert resumed.run_id == summary.run_id
    # step 3 trained again from checkpoint 2: its checkpoint written whole again; logged once
    assert check(folder_for(checkpoints, 3)) is None, "step 3 trained again from checkpoint 2"
    history = logged(summary.tracking_uri, summary.run_id)
    assert {step: len(values) for step, values in history["reward_mean"].items()} == {
        1: 1,
        2: 1,
        3: 1,
        4: 1,
    }


def test_resume_refuses_a_config_that_breaks_the_run_and_changes_nothing(
    tmp_path, reference, monkeypatch, capsys
):
    run_dir = Path(reference.run_dir)
    before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    changed = SETTINGS | {"train.learning_rate": 1e-3, "train.steps": 9}
    path = tiny_file(tmp_path / "changed.yaml", **changed)
    with pytest.raises(ConfigError) as error:
        resume(run_dir, config_path=path)
    assert error.value.problems == [
        "train.learning_rate: 0.0005 in the checkpoint, 0.001 now; a resumed run keeps its "
        "model, task, rollout, verification and optimizer settings (put it back, or start a "
        "new run with rvctl train)"
    ]
    with pytest.raises(ConfigError, match="train.steps: the run is at step 6 of 6; pass --steps"):
        resume(run_dir, {"train.steps": 6})
    result = run_rvctl(["resume", str(run_dir), "--config", str(path)], monkeypatch, capsys)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {error.value.problems[0]}"]
    with pytest.raises(ValueError, match="not a run folder"):
        resume(tmp_path / "nowhere")
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == before


def test_a_run_being_trained_cannot_be_resumed_by_a_second_process(reference):
    from rollverify.training.run_folder import RunBusy, run_lock

    with run_lock(Path(reference.run_dir)), pytest.raises(RunBusy, match="another process"):
        resume(reference.run_dir, {"train.steps": STEPS + 1})


def test_a_stop_while_a_step_trains_leaves_its_evaluation_to_the_resumed_run(tmp_path, monkeypatch):
    """SIGTERM arrives while step 2 trains (the handler's request, set as the rollout ends):
    the step finishes without touching the engine, the checkpoint records the evaluation it
    owed, and the resumed run evaluates first, at step 2. Nothing is missing from MLflow."""
    from rollverify.training.loop import TrainingLoop
    from rollverify.training.stopping import RunInterrupted

    rollout = TrainingLoop.rollout

    def stop_requested_during_step_2(self, prompts, trainer):
        batch = rollout(self, prompts, trainer)
        self.stop.requested |= self.trainer.state.global_step == 1
        return batch

    monkeypatch.setattr(TrainingLoop, "rollout", stop_requested_during_step_2)
    overrides = {"output": str(tmp_path), "train.steps": 4, "train.eval_every": 2}
    with pytest.raises(RunInterrupted) as stopped:
        train(load_config(config_file(tmp_path), overrides | {"train.checkpoint_every": 0}))
    assert stopped.value.step == 2
    monkeypatch.undo()
    (run_dir,) = tmp_path.glob("rollverify-s0-*")
    assert latest(run_dir / "checkpoints").state["loop"]["eval_pending"]
    summary = resume(run_dir)
    history = logged(summary.tracking_uri, summary.run_id)
    assert {step: len(values) for step, values in history["eval_accuracy"].items()} == {
        0: 1,
        2: 1,
        4: 1,
    }
    assert sorted(history["reward_mean"]) == [1, 2, 3, 4]
    assert MlflowClient(summary.tracking_uri).get_run(summary.run_id).info.status == "FINISHED"


def test_a_run_killed_before_its_first_checkpoint_refuses_another_experiment(tmp_path):
    """Nothing trained yet, but its MLflow run holds the config: a change is refused too."""
    run_dir = tmp_path / "rollverify-s0-killed"
    run_dir.mkdir()
    config = load_config(config_file(tmp_path))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config.to_dict()))
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"train": {"method": "grpo"}}))
    with pytest.raises(ConfigError, match="train.method: 'rollverify' in the checkpoint, 'grpo'"):
        resume(run_dir, config_path=other)
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml"]  # nothing started


def test_engines_left_with_mixed_weights_stop_the_run_after_the_steps_checkpoint(
    tmp_path, monkeypatch
):
    """An engine lost during a weight sync that cannot be sent again (a sharded trainer's)
    leaves the live engines with part of it (WeightsMixed): the step ends without touching the
    engine (its evaluation owed), its checkpoint is written, the run stops naming the engines
    and the version; rvctl resume goes on from there, every step logged once."""
    from rollverify.rollout.engines.hf_engine import HFEngine
    from rollverify.rollout.engines.protocol import WeightsMixed

    load = HFEngine.load_weights

    def lost_in_sync_2(self, named_tensors, version):
        if version == 2:
            raise WeightsMixed([1], [0], version)
        load(self, named_tensors, version)

    monkeypatch.setattr(HFEngine, "load_weights", lost_in_sync_2)
    overrides = {"output": str(tmp_path), "train.steps": 4, "train.eval_every": 2}
    with pytest.raises(WeightsMixed, match="engines 1 hold part of it; the run stops after step 2"):
        train(load_config(config_file(tmp_path), overrides | {"train.checkpoint_every": 0}))
    monkeypatch.undo()
    (run_dir,) = tmp_path.glob("rollverify-s0-*")
    checkpoint = latest(run_dir / "checkpoints")
    assert checkpoint.step == 2 and checkpoint.state["loop"]["eval_pending"]
    summary = resume(run_dir)
    history = logged(summary.tracking_uri, summary.run_id)
    assert sorted(history["reward_mean"]) == [1, 2, 3, 4]
    assert all(len(values) == 1 for values in history["reward_mean"].values())
    assert {step: len(v) for step, v in history["eval_accuracy"].items()} == {0: 1, 2: 1, 4: 1}


@pytest.mark.parametrize(
    "mode",
    [
        {},  # synchronous partial rollout
        {"rollout.mode": "async", "rollout.eta": 2, "rollout.lockstep": True},
        pytest.param(  # its thread (make test: test_engine_thread's unit test of the pause)
            {"rollout.mode": "async", "rollout.eta": 2, "rollout.lockstep": False},
            marks=pytest.mark.long,
        ),
    ],
    ids=["sync", "async-lockstep", "async-engine-thread"],
)
def test_an_engine_lost_mid_rollout_stops_the_run_with_its_tokens_checkpointed(
    tmp_path, monkeypatch, mode
):
    """vllm.node_lost: stop, as the rollout meets it (EngineLost from a poll of step 3's
    rollout; asynchronous: in the engine's own thread too): what was generated goes to the
    cache, a checkpoint of step 2 with it is written, the run stops with the engine's one line;
    rvctl resume ends the run with every step logged once and the paused trajectories
    resumed."""
    from rollverify.rollout.engines.hf_engine import HFEngine
    from rollverify.rollout.engines.protocol import EngineLost

    poll, polls = HFEngine.poll, []

    def lost_in_step_3(self, *args, **kwargs):
        polls.append(self.version)
        if self.version == 2 and polls.count(2) == 3:  # some tokens made, then the node lost
            raise EngineLost("vllm.node_lost: stop: no node had room for engine 0")
        return poll(self, *args, **kwargs)

    monkeypatch.setattr(HFEngine, "poll", lost_in_step_3)
    overrides = {"output": str(tmp_path), "train.steps": 4, "train.checkpoint_every": 0} | mode
    with pytest.raises(EngineLost, match="no node had room for engine 0"):
        train(load_config(config_file(tmp_path), overrides))
    monkeypatch.undo()
    (run_dir,) = tmp_path.glob("rollverify-s0-*")
    checkpoint = latest(run_dir / "checkpoints")
    # (the engine in its own thread: the trainer meets the loss in step 3's rollout, or in the
    # evaluation after step 3 if the engine ran ahead)
    assert checkpoint.step in ((2, 3) if mode.get("rollout.lockstep") is False else (2,))
    assert checkpoint.state["cache"], "the paused trajectories kept"
    assert checkpoint.tensors["cache"]["token_lengths"].sum() > 0, "with their tokens"
    summary = resume(run_dir)
    history = logged(summary.tracking_uri, summary.run_id)
    assert sorted(history["reward_mean"]) == [1, 2, 3, 4]
    assert all(len(values) == 1 for values in history["reward_mean"].values())
