"""train.precision: with model.dtype bfloat16, mixed keeps float32 master weights and AdamW
state (bfloat16 compute, bfloat16 weights to the engines); pure holds them in bfloat16, where
an update below half a weight's rounding step is lost."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rollverify.training.checkpoint.files import latest
from rollverify.training.run import train
from tests.runs import tiny

# lr 1e-6: AdamW moves each weight by ~1e-6 per step, far below half the bfloat16 rounding
# step of a weight of the tiny model's size (|w| ~ 0.02: 6e-5). The probe check: a bfloat16
# engine against the trainer's autocast forward differ by 0.3 on the tiny model (measured).
BF16 = {
    "model.dtype": "bfloat16",
    "train.learning_rate": 1e-6,
    "train.steps": 2,
    "vllm.sync_check_tolerance": 1.0,
}


def moved_share(tmp_path: Path, precision: str) -> tuple[float, dict[str, torch.Tensor]]:
    """The share of weights a 2-step run moved, and its checkpointed weights."""
    config = tiny(tmp_path / precision, "grpo", **BF16, **{"train.precision": precision})
    summary = train(config)
    weights = latest(Path(summary.run_dir) / "checkpoints").tensors["model"]
    start = AutoModelForCausalLM.from_pretrained(config.model_path()).state_dict()
    moved = total = 0
    for name, tensor in weights.items():
        before = start[name].to(tensor.dtype)
        moved += (tensor != before).sum().item()
        total += tensor.numel()
    return moved / total, weights


@pytest.mark.slow  # two 2-step runs in bfloat16 autocast, ~20 s
def test_mixed_precision_moves_weights_that_pure_bfloat16_cannot(tmp_path):
    mixed, mixed_weights = moved_share(tmp_path, "mixed")
    pure, pure_weights = moved_share(tmp_path, "pure")
    assert all(t.dtype == torch.float32 for t in mixed_weights.values())  # the masters
    assert all(t.dtype == torch.bfloat16 for t in pure_weights.values())
    assert mixed > 0.9, f"mixed precision moved only {mixed:.1%} of the weights"
    assert pure < 0.1, f"pure bfloat16 moved {pure:.1%} of the weights at lr 1e-6"


def test_the_in_process_engine_serves_the_compute_dtype(tmp_path):
    from rollverify.training.parts import make_engine
    from rollverify.training.weight_sync import in_dtype

    config = tiny(tmp_path, "grpo", **BF16)
    assert config.master_dtype() == "float32"
    model = AutoModelForCausalLM.from_pretrained(config.model_path())  # float32 masters
    engine = make_engine(config, model)
    assert next(engine.model.parameters()).dtype == torch.bfloat16
    assert next(model.parameters()).dtype == torch.float32  # the trainer's own: not cast
    sent = dict(in_dtype(model.state_dict().items(), config.model.dtype))
    assert {t.dtype for t in sent.values()} == {torch.bfloat16}
    pure = tiny(tmp_path, "grpo", **BF16, **{"train.precision": "pure"})
    assert pure.master_dtype() == "bfloat16"
