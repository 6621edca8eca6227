"""Asynchronous training in the loop (rollout.mode async, rollverify/rollout/async_rollout.py) on
the hf engine in lock-step: eta 0 is synchronous grpo, the staleness bound holds on real
tokens, updates land in flight with each token keeping its version, verification truncates and
regenerates before a trajectory trains, and a run killed in generation or in training resumes
bit for bit."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from rollverify.config import ConfigError, load_config
from rollverify.training.checkpoint.files import folder_for, latest
from rollverify.training.checkpoint.files import load as load_checkpoint
from rollverify.training.run import resume, train
from tests.cli import run_cli
from tests.runs import (
    TINY,
    assert_same_weights_and_cache,
    groups_in_play,
    history,
    metric_history,
    stopped_after,
    tiny,
    tiny_file,
)


def final_checkpoint(summary):
    return latest(Path(summary.run_dir) / "checkpoints")


def without_timings(metrics: dict) -> dict:
    """Wall-clock figures differ between any two runs (cost_*: measured seconds priced)."""
    timed = ("seconds", "cost_", "trl/step_time")
    return {k: v for k, v in metrics.items() if not any(t in k for t in timed)}


def test_eta_0_trains_exactly_what_synchronous_grpo_trains(tmp_path):
    """The same seed: every metric but the timings, and the final weights, bit for bit."""
    sync = train(tiny(tmp_path / "sync", "grpo"))
    eta0 = train(tiny(tmp_path / "async", "grpo", **{"rollout.mode": "async", "rollout.eta": 0}))
    assert without_timings(history(sync)) == without_timings(history(eta0))
    ours, theirs = final_checkpoint(eta0), final_checkpoint(sync)
    for name, tensor in theirs.tensors["model"].items():
        assert torch.equal(ours.tensors["model"][name], tensor), name


@pytest.mark.parametrize("eta", [1, 2])
def test_no_trained_token_lags_more_than_eta_and_tokens_keep_the_version_that_sampled_them(
    tmp_path, eta
):
    summary = train(
        tiny(
            tmp_path, "partial",
            **{"rollout.mode": "async", "rollout.eta": eta, "train.steps": 5,
               "train.checkpoint_every": 1, "train.keep_checkpoints": 5},
        )
    )  # fmt: skip
    metrics = history(summary)
    assert max(metrics["staleness_max"].values()) == eta  # reached: async runs ahead
    # The sequences in flight after each step (its checkpoint holds them), their versions in
    # the order they were sampled. At eta 2 some have run through an update already (at eta 1
    # such a one is always trained first: its group is due).
    spanning = 0
    for step in range(1, 6):
        checkpoint = load_checkpoint(folder_for(Path(summary.run_dir) / "checkpoints", step))
        # nothing lost: every group in play has its G samples there (an evaluation between
        # steps, which uses the engine too, leaves them be)
        groups = sorted(r["group_id"] for r in checkpoint.state["cache"])
        in_play = checkpoint.state["rollout_counts"]["async"]["start_versions"]
        assert groups == sorted(2 * [int(g) for g in in_play]), step
        cache = checkpoint.tensors
        for versions in cache["cache"]["versions"].split(cache["cache"]["token_lengths"].tolist()):
            assert versions.tolist() == sorted(versions.tolist())
            spanning += len(set(versions.tolist())) > 1
    assert (spanning > 0) == (eta == 2)


def test_verification_truncates_stale_trajectories_before_they_train_and_regenerates_them(tmp_path):
    summary = train(
        tiny(
            tmp_path, "rollverify", **{"rollout.mode": "async", "rollout.eta": 2, "train.steps": 4}
        )
    )
    metrics = history(summary)
    assert min(metrics["acceptance_rate"].values()) < 1
    assert max(metrics["tokens_regenerated_total"].values()) > 0
    assert max(metrics["staleness_max"].values()) <= 2


def test_async_refuses_what_it_does_not_combine_with_yet(tmp_path):
    for settings, named in [
        ({"rollout.engine": "vllm", "rollout.keep_kv": True}, "rollout.keep_kv"),
        ({"train.updates_per_rollout": 2}, "train.updates_per_rollout"),
        ({"rollout.max_staleness": 1}, "rollout.max_staleness"),
    ]:
        overrides = {"rollout.mode": "async", "output": str(tmp_path)} | settings
        with pytest.raises(ConfigError, match=named):
            load_config(overrides=overrides)
    load_config(overrides={"rollout.mode": "async", "rollout.engine": "vllm"})  # recomputes KV


ASYNC = {
    "train.method": "rollverify",
    "rollout.mode": "async",
    "rollout.eta": 2,
    "train.steps": 6,
    "train.checkpoint_every": 2,
}


@pytest.mark.slow
def test_killed_in_generation_and_in_training_resumes_bit_for_bit(tmp_path):
    """SIGKILLed mid-rollout of step 3 and after the optimizer step of step 5, resumed each
    time from the step-2 and step-4 checkpoints (their sequences in flight and groups waiting
    held in them), it ends where the run that never stopped ends."""
    reference = train(
        load_config(tiny_file(tmp_path / "ref.yaml", **ASYNC), {"output": str(tmp_path / "ref")})
    )
    output = tmp_path / "runs"
    config = str(tiny_file(tmp_path / "tiny.yaml", **ASYNC))
    first = run_cli("train", "--config", config, "--output", str(output), kill_at="rollout:3#10")
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    (run_dir,) = output.glob("*-s0-*")
    assert latest(run_dir / "checkpoints").step == 2
    second = run_cli("resume", str(run_dir), kill_at="train:5")
    assert second.returncode == -signal.SIGKILL, second.stderr[-2000:]
    assert latest(run_dir / "checkpoints").step == 4
    final = run_cli("resume", str(run_dir))
    assert final.returncode == 0, final.stderr[-3000:]

    ours, theirs = latest(run_dir / "checkpoints"), final_checkpoint(reference)
    assert ours.step == theirs.step == 6
    assert len(theirs.state["cache"]) > 0, "the test must have sequences in flight to lose"
    for group in ("model", "optimizer", "cache"):
        for name, tensor in theirs.tensors[group].items():
            assert torch.equal(ours.tensors[group][name], tensor), f"{group}.{name}"
    for part in ("cache", "answers", "rollout_counts", "task", "monitor"):
        assert ours.state[part] == theirs.state[part], part


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "lockstep"),
    [
        pytest.param("weights-in-flight", True, id="weights-in-flight-lockstep"),
        pytest.param("regenerating", False, id="regenerating-engine-thread"),
        # the other two in the long tier (make test-all): make test stays under 10 minutes
        pytest.param("weights-in-flight", False, id="weights-in-flight-engine-thread",
                     marks=pytest.mark.long),
        pytest.param("regenerating", True, id="regenerating-lockstep", marks=pytest.mark.long),
    ],
)  # fmt: skip
def test_killed_where_asynchronous_work_is_in_flight_resumes_with_nothing_lost(
    tmp_path, lockstep, point
):
    """SIGKILLed as an update is on its way to the engine (its sequences stopped for it, no
    tensor loaded) or as sequences verification cut are regenerated, from step 3 on; resumed
    from the step-2 checkpoint: in lock-step it ends where the run that never stopped ends, bit
    for bit; with the engine in its own thread every group in play at the checkpoint is
    trained once or still in play at the end, with all its members there."""
    settings = ASYNC | {"rollout.lockstep": lockstep}
    config = str(tiny_file(tmp_path / "tiny.yaml", **settings))
    output = tmp_path / "runs"
    killed = run_cli("train", "--config", config, "--output", str(output), kill_at=f"{point}:3")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (run_dir,) = output.glob("*-s0-*")
    saved = latest(run_dir / "checkpoints")
    assert saved.step in (2, 4) and len(saved.state["cache"]) > 0
    final = run_cli("resume", str(run_dir))
    assert final.returncode == 0, final.stderr[-3000:]
    end = latest(run_dir / "checkpoints")
    assert end.step == ASYNC["train.steps"]
    logged = metric_history(f"sqlite:///{output / 'mlflow.db'}", end.state["mlflow"]["run_id"])
    assert sorted(logged["reward_mean"]) == list(range(1, end.step + 1))
    if lockstep:  # bit for bit: weights, optimizer, cache, counters and every metric
        reference = train(load_config(config, {"output": str(tmp_path / "ref")}))
        theirs = final_checkpoint(reference)
        for group in ("model", "optimizer", "cache"):
            for name, tensor in theirs.tensors[group].items():
                assert torch.equal(end.tensors[group][name], tensor), f"{group}.{name}"
        for part in ("cache", "answers", "rollout_counts", "task", "monitor"):
            assert end.state[part] == theirs.state[part], part
        assert without_timings(logged) == without_timings(history(reference))
        return
    counts = end.state["rollout_counts"]["async"]
    in_play = [int(g) for g in counts["start_versions"]]
    assert sorted(r["group_id"] for r in end.state["cache"]) == sorted(2 * in_play)
    batch_groups = TINY["rollout.batch_groups"]
    assert counts["started"] == end.step * batch_groups + len(in_play), "each group trained once"


@pytest.mark.parametrize("lockstep", [True, False])
def test_a_stop_keeps_the_sequences_in_flight_and_resume_continues_them(tmp_path, lockstep):
    """SIGTERM after step 2: the run stops at its next safe point with the engine's sequences
    in its checkpoint, and `resume` ends the run; in lock-step where the run that never
    stopped ends, bit for bit."""
    settings = {"rollout.mode": "async", "rollout.eta": 2, "rollout.lockstep": lockstep}
    settings |= {"train.steps": 4, "train.checkpoint_every": 4}
    run_dir = stopped_after(tiny(tmp_path / "stopped", "rollverify", **settings), step=2)
    saved = latest(run_dir / "checkpoints")
    assert saved.step in (2, 3) and len(saved.state["cache"]) > 0
    groups_in_play(saved, group_size=2)
    assert resume(run_dir).steps == 4
    if lockstep:
        reference = train(tiny(tmp_path / "reference", "rollverify", **settings))
        assert_same_weights_and_cache(latest(run_dir / "checkpoints"), final_checkpoint(reference))


def test_a_peer_correction_trains_asynchronously_too(tmp_path):
    """tis on pi_old recomputed: its token weights reach the loss in async mode as in sync."""
    summary = train(tiny(tmp_path, "tis", **{"rollout.mode": "async", "rollout.eta": 2}))
    metrics = history(summary)
    assert "trl/correction/token_share" in metrics and max(metrics["staleness_max"].values()) > 0


@pytest.mark.slow
def test_a_collapsing_acceptance_rate_turns_an_asynchronous_run_synchronous(tmp_path):
    """As tests/test_switching.py's run, asynchronous on the in-process engine: acceptance
    falls, the window fills, the run switches; from then on no group starts before the policy
    it trains under, so once the groups started earlier are trained (within eta steps), no
    token is older than its policy: nothing is left to verify, nothing is cut or regenerated."""
    steps, eta = 10, 2
    settings = {"rollout.mode": "async", "rollout.eta": eta, "train.steps": steps}
    settings |= {"train.learning_rate": 0.05, "verify.window": 2, "verify.ds": 1e-3}
    summary = train(tiny(tmp_path, "rollverify", **settings))
    metrics = history(summary)
    switch = summary.switch_step
    assert switch is not None and switch + eta < steps - 2, "the switch must leave steps to check"
    assert metrics["switched"] == {s: float(s >= switch) for s in range(1, steps + 1)}
    verified = metrics["cache_tokens_verified"]
    assert all(verified[s] > 0 for s in range(2, switch + 1)), "stale tokens verified before"
    synchronous = range(switch + eta + 1, steps + 1)
    assert all(verified[s] == 0 for s in synchronous), verified
    regenerated = metrics["tokens_regenerated_total"]
    assert len({regenerated[s] for s in synchronous}) == 1, regenerated
