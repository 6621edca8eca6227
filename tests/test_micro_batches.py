"""How a rollout batch is trained: train.micro_batch_size (passes of m sequences, TRL's gradient
accumulation: the same update as one pass) and train.updates_per_rollout (the batch split
into optimizer steps, TRL's steps_per_generation: DAPO/verl's mini-batches)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rollverify.config import ConfigError
from rollverify.core.methods import METHODS
from rollverify.training.checkpoint.files import latest
from rollverify.training.run import resume, train
from rollverify.training.trl_adapter import grpo_config
from tests.runs import cached, history, tiny

BATCH = 4  # the tiny run: 2 groups of 2


def final_weights(tmp_path: Path, micro: int | None, loss_type: str) -> tuple[dict, dict]:
    config = tiny(
        tmp_path / f"m{micro}",
        "rollverify",
        **{"train.micro_batch_size": micro, "train.loss_type": loss_type},
    )
    summary = train(config)
    return latest(Path(summary.run_dir) / "checkpoints").tensors["model"], history(summary)


@pytest.mark.slow  # six 3-step runs, ~25 s
@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_micro_batches_give_the_update_of_the_whole_batch(tmp_path, loss_type):
    whole, whole_metrics = final_weights(tmp_path, None, loss_type)
    for micro in (2, 1):
        weights, metrics = final_weights(tmp_path, micro, loss_type)
        assert metrics["tokens_generated"] == whole_metrics["tokens_generated"]  # same samples
        for name, tensor in whole.items():
            torch.testing.assert_close(weights[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    # Not vacuous: the weights moved over the 3 steps.
    base = tiny(tmp_path / "base", "rollverify")
    from transformers import AutoModelForCausalLM

    start = AutoModelForCausalLM.from_pretrained(base.model_path()).state_dict()
    assert max((whole[n] - start[n]).abs().max().item() for n in whole) > 1e-3


def test_trl_gets_passes_of_the_micro_batch_summing_to_the_step(tmp_path):
    config = tiny(tmp_path, "grpo", **{"train.micro_batch_size": 2})
    args = grpo_config(config, METHODS["grpo"], str(tmp_path / "trl"))
    assert args.per_device_train_batch_size == 2 and args.gradient_accumulation_steps == 2
    assert args.generation_batch_size == BATCH  # one rollout per optimizer step
    whole = grpo_config(tiny(tmp_path, "grpo"), METHODS["grpo"], str(tmp_path / "trl"))
    assert whole.per_device_train_batch_size == BATCH and whole.gradient_accumulation_steps == 1


def test_a_micro_batch_that_does_not_divide_the_batch_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="train.micro_batch_size: must divide the step's batch"):
        tiny(tmp_path, "grpo", **{"train.micro_batch_size": 3})


# -- train.updates_per_rollout: a rollout batch split into optimizer steps (mini-batches) ----


def test_trl_generates_once_per_updates_per_rollout_steps(tmp_path):
    for micro, per_device, accumulated in [(None, 2, 1), (1, 1, 2)]:
        settings = {"train.updates_per_rollout": 2, "train.micro_batch_size": micro}
        args = grpo_config(tiny(tmp_path, "grpo", **settings), METHODS["grpo"], str(tmp_path))
        assert args.per_device_train_batch_size == per_device
        assert args.gradient_accumulation_steps == accumulated
        assert args.steps_per_generation == 2 * accumulated  # one rollout per 2 steps
        assert args.generation_batch_size == BATCH
    with pytest.raises(ConfigError, match="train.updates_per_rollout: must divide the rollout"):
        tiny(tmp_path, "grpo", **{"train.updates_per_rollout": 3})
    with pytest.raises(ConfigError, match=r"train.micro_batch_size: must divide the step's batch"):
        tiny(tmp_path, "grpo", **{"train.updates_per_rollout": 2, "train.micro_batch_size": 4})


@pytest.mark.slow  # three short runs, ~15 s
def test_each_update_syncs_and_verifies_and_a_rollout_feeds_two(tmp_path):
    settings = {"train.updates_per_rollout": 2, "train.steps": 4, "train.checkpoint_every": 1}
    summary = train(tiny(tmp_path / "whole", "partial", **settings))
    metrics = history(summary)
    assert sorted(metrics["rollout_seconds"]) == [1, 3]  # a rollout every 2 optimizer steps
    assert sorted(metrics["tokens_generated"]) == [1, 3]
    for name in ("sync_seconds", "train_seconds", "cache_tokens_verified", "entropy_mean"):
        assert sorted(metrics[name]) == [1, 2, 3, 4], name
    # The policy version advances per optimizer step: the step-3 rollout samples with the
    # weights synced after step 2 (version 2, not 1).
    versions = [int(v) for t in cached(summary.run_dir, 4) for v in t.versions.tolist()]
    assert max(versions) == 2
    # Checkpoints land between rollouts only (checkpoint_every 1: steps 2 and 4).
    folders = sorted(p.name for p in (Path(summary.run_dir) / "checkpoints").glob("step-*"))
    assert folders == ["step-000000", "step-000002", "step-000004"]
    # A run stopped at a boundary and resumed ends with the same weights.
    half = train(tiny(tmp_path / "half", "partial", **settings | {"train.steps": 2}))
    resumed = resume(half.run_dir, {"train.steps": 4})
    ours = latest(Path(resumed.run_dir) / "checkpoints").tensors["model"]
    theirs = latest(Path(summary.run_dir) / "checkpoints").tensors["model"]
    assert all(torch.equal(ours[name], theirs[name]) for name in theirs)
