"""What TRL's loss is given by a training step: the ratio's denominator, dropped samples, and
the loss settings of the loss-level methods.

A spy wraps the real trainer's `_generate_and_score_completions` (the batch the loss trains on,
in rollout order) and records it with the trajectories it came from; it calls through and
changes nothing. Real TRL, real tiny model, real rollouts on the hf engine.

TRL has no public hook for the batch its loss receives, so the spy and the gradient checks use
TRL 1.16's `_generate_and_score_completions`, `_get_per_token_logps_and_entropies` and
`_compute_loss` (the methods our adapter builds on). A TRL upgrade that renames them fails
these tests loudly (AttributeError) rather than letting them pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from rollverify.core.methods import METHODS
from rollverify.rollout.trajectory import PaddedTrajectories, Trajectory
from rollverify.training.checkpoint.files import latest
from rollverify.training.loop import TrainingLoop
from rollverify.training.run import train
from rollverify.training.trl_adapter import BehaviorRatioGRPOTrainer, grpo_config
from tests.runs import history, tiny

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
                trajectories=list(loop.trained_batch.result.trajectories()),
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
    # ... and TRL's loss reads that denominator: without it, TRL takes the current log-probs
    # (ratio 1 everywhere) and the gradient of the same batch is another one.
    learning = [b for b in batches if b.inputs["advantages"].abs().sum() > 0]
    assert learning, "some batch must carry a learning signal"
    batch = learning[-1]
    ratio_one = {k: v for k, v in batch.inputs.items() if k != "old_per_token_logps"}
    assert not torch.allclose(_gradient(batch, batch.inputs), _gradient(batch, ratio_one))


def _gradient(batch: LossBatch, inputs: dict[str, Any]) -> torch.Tensor:
    """The gradient of TRL's loss on `inputs` at the trainer's weights, flattened."""
    model = batch.trainer.model
    model.zero_grad()
    batch.trainer._compute_loss(model, inputs).backward()
    gradient = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad()
    return gradient


# The members of a group start in one rollout, so they are equally stale: the staleness filter
# drops whole groups. The OPS filter, with a bound inside the spread of OPS (measured for this
# seed), drops part of a group, where the baseline of the kept members is at stake.
FILTERS = [
    ("staleness-filter", {"verify.staleness_bound": 0, "train.learning_rate": STALE_LR}, False),
    ("ops-filter", {"verify.ops_bound": 0.2, "train.learning_rate": 0.01}, True),
]


@pytest.mark.parametrize(("method", "settings", "part_of_a_group"), FILTERS)
def test_a_dropped_sample_gets_no_gradient_and_leaves_the_group_baseline(
    tmp_path, batches, method, settings, part_of_a_group
):
    config = tiny(tmp_path, method, **settings)
    train(config)
    mixed_groups = 0  # groups with kept and dropped members: where the baseline is at stake
    for batch in batches:
        keep = torch.tensor([r is not None for r in batch.rewards])
        mask, advantages = batch.loss_mask, batch.inputs["advantages"]
        assert not mask[~keep].any(), "a dropped sample's tokens must be out of the loss"
        assert mask[keep].any(-1).all()
        assert (advantages[~keep] == 0).all()
        for members in _groups(batch, config.rollout.group_size):
            kept = [batch.rewards[i] for i in members if batch.rewards[i] is not None]
            mixed_groups += 0 < len(kept) < len(members)
            for i in members:
                if batch.rewards[i] is not None:
                    expected = _advantage(batch.rewards[i], kept)
                    assert advantages[i].item() == pytest.approx(expected, abs=1e-4), (i, kept)
    assert (mixed_groups > 0) == part_of_a_group
    batch = next(b for b in reversed(batches) if None in b.rewards)
    _loss_ignores_dropped_rows(batch)


def _groups(batch: LossBatch, group_size: int) -> list[range]:
    """Row ranges of the GRPO groups, as TRL forms them (G consecutive rows), checked against
    the trajectories' own group ids."""
    groups = [range(i, i + group_size) for i in range(0, len(batch.trajectories), group_size)]
    for members in groups:
        assert len({batch.trajectories[i].group_id for i in members}) == 1, "a group is contiguous"
    return groups


def _advantage(reward: float, kept: list[float]) -> float:
    """TRL's group advantage over the kept members only: (r - mean) / (std + 1e-4)."""
    if len(kept) < 2:
        return 0.0  # a group of one: reward - its own mean
    spread = torch.tensor(kept).std().item()  # TRL's nanstd: Bessel-corrected
    return (reward - sum(kept) / len(kept)) / (spread + 1e-4)


def _loss_ignores_dropped_rows(batch: LossBatch) -> None:
    """TRL's loss on this batch has the same gradient whatever a dropped row holds."""
    dropped = torch.tensor([r is None for r in batch.rewards])
    altered = dict(batch.inputs)
    altered["advantages"] = batch.inputs["advantages"].clone()
    altered["advantages"][dropped] = 5.0  # a large signal, if the row reached the loss
    completion = batch.inputs["completion_ids"].clone()
    vocab = batch.trainer.processing_class.vocab_size
    completion[dropped] = (completion[dropped] + 1) % vocab
    altered["completion_ids"] = completion
    torch.testing.assert_close(
        _gradient(batch, altered), _gradient(batch, batch.inputs), atol=1e-7, rtol=1e-5
    )


# Each loss-level method and what TRL must be told for it (the papers' settings).
LOSS_SETTINGS = {
    "gspo": {"importance_sampling_level": "sequence", "loss_type": "grpo"},
    "sapo": {"importance_sampling_level": "token", "loss_type": "sapo"},
    "vespo": {"importance_sampling_level": "token", "loss_type": "vespo"},
}
PARTIAL_SETTINGS = {"importance_sampling_level": "token", "loss_type": "dapo"}  # train.loss_type


def test_the_loss_level_methods_set_their_trl_loss(tmp_path):
    config = tiny(tmp_path, "partial")
    assert sorted(n for n, m in METHODS.items() if m.trl_overrides) == sorted(LOSS_SETTINGS)
    for name, settings in LOSS_SETTINGS.items():
        args = grpo_config(config, METHODS[name], str(tmp_path))
        assert {field: getattr(args, field) for field in settings} == settings, name
    gspo = grpo_config(config, METHODS["gspo"], str(tmp_path))
    assert (gspo.epsilon, gspo.epsilon_high) == (3e-4, 4e-4)  # GSPO's sequence-level clip


@pytest.mark.slow
def test_the_loss_level_methods_train_differently_from_partial_and_each_other(tmp_path, batches):
    """Same seed, same first rollout: only the loss differs, and with it the weights. The
    trainer TRL built for each holds the loss asked for. (Two steps: on the first, on-policy,
    some losses differ from partial's only in scale, which AdamW's first update hides.)"""
    finals, first_rewards = {}, {}
    for name in ["partial", *LOSS_SETTINGS]:
        summary = train(tiny(tmp_path / name, name, **{"train.steps": 2}))
        finals[name] = latest(Path(summary.run_dir) / "checkpoints").tensors["model"]
        first_rewards[name] = history(summary)["reward_mean"][1]
        trainer = batches[-1].trainer
        wanted = LOSS_SETTINGS.get(name, PARTIAL_SETTINGS)
        assert {field: getattr(trainer, field) for field in wanted} == wanted, name
    assert len(set(first_rewards.values())) == 1, "the first rollout is the same for all"
    names = list(finals)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            moved = max((finals[a][k] - finals[b][k]).abs().max().item() for k in finals[a])
            assert moved > 1e-6, f"{a} and {b} trained alike: a loss was not used"
