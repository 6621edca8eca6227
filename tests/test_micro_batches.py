"""train.micro_batch_size: the step's B x G sequences in passes of m (gradient accumulation,
TRL's own), one optimizer step: the same update as the whole batch in one pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rollverify.checkpoint_files import latest
from rollverify.config import ConfigError
from rollverify.methods import METHODS
from rollverify.training.run import train
from rollverify.training.trl_adapter import grpo_config
from tests.runs import history, tiny

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
