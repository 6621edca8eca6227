"""What TRL's loss is given by a training step: the ratio's denominator, dropped samples, and
the loss settings of the loss-level methods.

A spy wraps the real trainer's `_generate_and_score_completions` (the batch the loss trains on,
in rollout order) and records it with the trajectories it came from; it calls through and
changes nothing. Real TRL, real tiny model, real rollouts on the hf engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from rollverify.checkpoint import latest
from rollverify.methods import METHODS
from rollverify.training.loop import TrainingLoop
from rollverify.training.run import train
from rollverify.training.trl_adapter import BehaviorRatioGRPOTrainer, grpo_config
from rollverify.trajectory import PaddedTrajectories, Trajectory
from tests.test_train import history, tiny

STALE_LR = 0.05  # the policy moves visibly in one step: stale tokens are far from ratio 1


@dataclass
class LossBatch:
    """One step's batch as the loss receives it, rows in rollout order."""

    version: int  # policy version of the weights being trained (tokens of it are on-policy)
    trajectories: list[Trajectory]
    inputs: dict[str, Any]  # TRL's batch: old_per_token_logps, advantages, masks, ... [B, T]
    current: torch.Tensor  # log pi_theta of each completion token, as the loss computes it
    rewards: list[float | None]  # what our reward function handed TRL (None: dropped)
    trainer: BehaviorRatioGRPOTrainer

    @property
    def padded(self) -> PaddedTrajectories:
        return PaddedTrajectories.of(self.trajectories)

    @property
    def loss_mask(self) -> torch.Tensor:
        """The tokens the loss sums over (TRL: completion_mask * tool_mask): bool [B, T]."""
        mask = self.inputs["completion_mask"]
        if "tool_mask" in self.inputs:
            mask = mask * self.inputs["tool_mask"]
        return mask.bool()


@pytest.fixture
def batches(monkeypatch) -> list[LossBatch]:
    recorded: list[LossBatch] = []
    rewards: list[list[float | None]] = []
    score = BehaviorRatioGRPOTrainer._generate_and_score_completions
    reward = TrainingLoop.reward

    def reward_spy(self, *args, **kwargs):
        rewards.append(reward(self, *args, **kwargs))
        return rewards[-1]

    def score_spy(self, inputs):
        output = score(self, inputs)
        loop = self.rollout_func.__self__
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        with torch.no_grad():  # the loss's own call, on the weights it will differentiate
            current, _, _ = self._get_per_token_logps_and_entropies(
                self.model, ids, attention, output["completion_ids"].shape[1]
            )
        recorded.append(
            LossBatch(
                version=loop.version,
                trajectories=list(loop.last_rollout.trajectories()),
                inputs={
                    k: v.detach().clone() if torch.is_tensor(v) else v for k, v in output.items()
                },
                current=current.float(),
                rewards=rewards[-1],
                trainer=self,
            )
        )
        return output

    monkeypatch.setattr(TrainingLoop, "reward", reward_spy)
    monkeypatch.setattr(BehaviorRatioGRPOTrainer, "_generate_and_score_completions", score_spy)
    return recorded


def test_the_ratio_is_pi_over_the_behavior_policy_of_each_token(tmp_path, batches):
    """Stale tokens enter the loss with pi_theta / mu_{v_t} (far from 1 after a big step),
    tokens of the current policy with ratio 1 (spec, "Policy-gradient ratio")."""
    train(tiny(tmp_path, "partial", **{"train.learning_rate": STALE_LR}))
    assert len(batches) == 3
    stale_ratios = []
    for batch in batches:
        padded = batch.padded
        mask = padded.mask
        width = mask.shape[1]
        assert "old_per_token_logps" in batch.inputs, "the loss would take ratio 1 for every token"
        denominator = batch.inputs["old_per_token_logps"][:, :width]
        torch.testing.assert_close(denominator[mask], padded.behavior_logprobs[mask])
        ratio = torch.exp(batch.current[:, :width] - denominator)
        on_policy = mask & (padded.versions == batch.version)
        stale = mask & (padded.versions < batch.version)
        assert on_policy.any()
        assert (ratio[on_policy] - 1).abs().max() < 1e-3  # engine vs trainer float rounding
        stale_ratios.append(ratio[stale])
    stale = torch.cat(stale_ratios)
    assert stale.numel() > 0, "partial rollout must train stale tokens by step 3"
    assert (stale - 1).abs().max() > 0.05, "stale tokens keep the ratio to their old policy"


@pytest.mark.parametrize(
    ("method", "bound"),
    [
        ("staleness-filter", {"verify.staleness_bound": 0}),
        ("ops-filter", {"verify.ops_bound": 0.02}),
    ],
)
def test_a_dropped_sample_gets_no_gradient_and_leaves_the_group_baseline(
    tmp_path, batches, method, bound
):
    config = tiny(tmp_path, method, **{"train.learning_rate": STALE_LR, **bound})
    train(config)
    group_size = config.rollout.group_size
    for batch in batches:
        keep = torch.tensor([r is not None for r in batch.rewards])
        mask, advantages = batch.loss_mask, batch.inputs["advantages"]
        assert not mask[~keep].any(), "a dropped sample's tokens must be out of the loss"
        assert mask[keep].any(-1).all()
        assert (advantages[~keep] == 0).all()
        for start in range(0, len(batch.rewards), group_size):
            members = range(start, start + group_size)
            kept = [batch.rewards[i] for i in members if batch.rewards[i] is not None]
            for i in members:
                if batch.rewards[i] is None:
                    continue
                baseline = sum(kept) / len(kept)  # of the kept members only (TRL: nanmean)
                spread = torch.tensor(kept).std().item() if len(kept) > 1 else float("nan")
                expected = batch.rewards[i] - baseline
                expected = expected / (spread + 1e-4) if len(kept) > 1 else 0.0
                assert advantages[i].item() == pytest.approx(expected, abs=1e-4), (i, kept)
    with_drops = [b for b in batches if None in b.rewards]
    assert with_drops, "the bound must drop samples, or nothing is tested"
    _loss_ignores_dropped_rows(with_drops[-1])


def _loss_ignores_dropped_rows(batch: LossBatch) -> None:
    """TRL's loss on this batch has the same gradient whatever a dropped row holds."""
    trainer = batch.trainer
    model = trainer.model
    dropped = torch.tensor([r is None for r in batch.rewards])

    def gradient(inputs: dict[str, Any]) -> torch.Tensor:
        model.zero_grad()
        trainer._compute_loss(model, inputs).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    base = gradient(batch.inputs)
    altered = dict(batch.inputs)
    altered["advantages"] = batch.inputs["advantages"].clone()
    altered["advantages"][dropped] = 5.0  # a large signal, if the row reached the loss
    completion = batch.inputs["completion_ids"].clone()
    completion[dropped] = (completion[dropped] + 1) % trainer.processing_class.vocab_size
    altered["completion_ids"] = completion
    torch.testing.assert_close(gradient(altered), base, atol=1e-7, rtol=1e-5)
    model.zero_grad()


LOSS_METHODS = [name for name, method in METHODS.items() if method.trl_overrides]


def test_the_loss_level_methods_set_their_trl_loss(tmp_path):
    config = tiny(tmp_path, "partial")
    assert sorted(LOSS_METHODS) == ["gspo", "sapo", "vespo"]
    for name in LOSS_METHODS:
        args = grpo_config(config, METHODS[name], str(tmp_path))
        for field, value in METHODS[name].trl_overrides.items():
            assert getattr(args, field) == value, (name, field)


def test_the_loss_level_methods_train_differently_from_partial(tmp_path, batches):
    """Same seed, same first rollout: only the loss differs, and with it the weights."""
    finals, first_rewards = {}, {}
    for name in ["partial", *LOSS_METHODS]:
        summary = train(tiny(tmp_path / name, name))
        finals[name] = latest(Path(summary.run_dir) / "checkpoints")
        first_rewards[name] = history(summary)["reward_mean"][1]
        trainer = batches[-1].trainer
        for field, value in METHODS[name].trl_overrides.items():
            attribute = {"epsilon": "epsilon_low"}.get(field, field)
            assert getattr(trainer, attribute, getattr(trainer.args, field)) == value, (name, field)
    assert len(set(first_rewards.values())) == 1, "the first rollout is the same for all"
    partial = finals["partial"].tensors["model"]
    for name in LOSS_METHODS:
        weights = finals[name].tensors["model"]
        moved = max((weights[k] - partial[k]).abs().max().item() for k in partial)
        assert moved > 1e-6, f"{name} trained exactly like partial: its loss was not used"
