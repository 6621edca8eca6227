"""The peers' corrections and the ratio's denominator, checked by hand on a small batch.

The real trainer of each method (TRL 1.16's GRPOTrainer through our adapter, the shipped tiny
model) is handed one batch through its rollout_func: 2 groups of 2 responses whose behavior
log-probs mu are pi_old (the model's own log-probs) shifted by chosen token weights
w = pi_old / mu. What TRL's batch carries (the weight of each token, the ratio's denominator)
and the loss it computes are compared with the published rules written out here.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from rollverify.config import ConfigError
from rollverify.core.corrections import CORRECTIONS, m2po_mask, mismatch
from rollverify.core.methods import METHODS
from rollverify.training.trl_adapter import build_trainer
from tests.cli import run_rvctl
from tests.runs import tiny

# Token weights w = pi_old / mu, one row per response (2 groups of 2, 6 tokens each).
WEIGHTS = torch.tensor(
    [
        [0.3, 1.0, 1.5, 3.0, 6.0, 1.0],  # each bound crossed once; sequence ratio 8.1
        [1.0] * 6,  # on-policy
        [1.2] * 6,  # sequence ratio 1.2^6 = 2.99: outside MIS's [0.5, 2]
        [0.9] * 6,  # sequence ratio 0.53: inside; mean log(mu/pi) = 0.105 > OPSM's 0.03
    ]
)
REWARDS = [0.0, 1.0, 1.0, 0.0]  # rows 0 and 3 get negative advantages
PROMPT = [3, 4, 5, 6]


def batch(trainer, weights: torch.Tensor) -> dict:
    """rollout_func's answer: fixed responses, mu = pi_old / weights (pi_old: the model now)."""
    rows, width = weights.shape
    generator = torch.Generator().manual_seed(0)
    completions = torch.randint(3, 15, (rows, width), generator=generator)
    ids = torch.cat([torch.tensor([PROMPT] * rows), completions], dim=1)
    with torch.no_grad():
        pi_old, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, torch.ones_like(ids), width
        )
    mu = pi_old.float() - weights.log()
    return {
        "prompt_ids": [PROMPT] * rows,
        "completion_ids": completions.tolist(),
        "logprobs": mu.tolist(),
        "reward_value": REWARDS,
    }


def trainer_of(tmp_path, method: str, weights: torch.Tensor = WEIGHTS, **settings):
    config = tiny(tmp_path, method, **settings)
    model = AutoModelForCausalLM.from_pretrained(config.model_path())
    tokenizer = AutoTokenizer.from_pretrained(config.model_path())

    def reward(reward_value, **_):
        return reward_value

    trainer = build_trainer(
        config,
        METHODS[method],
        model,
        tokenizer,
        reward,
        lambda prompts, trainer: batch(trainer, weights),
        TrainerCallback(),
        str(tmp_path / "trl"),
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # (set by TRL's training loop)
    return trainer


def scored(trainer) -> dict:
    output = trainer._generate_and_score_completions([{"prompt": ""} for _ in REWARDS])
    assert (output["advantages"] != 0).all(), "every row must carry a learning signal"
    return output


def m2po_by_hand(log_w: torch.Tensor, tau: float) -> torch.Tensor:
    """M2PO as AReaL's docs say it: drop the largest (log w)^2, one at a time, until the mean
    of the rest is below tau (one token at least stays)."""
    m2 = (log_w**2).flatten().tolist()
    kept = set(range(len(m2)))
    while len(kept) > 1 and sum(m2[i] for i in kept) / len(kept) >= tau:
        kept.remove(max(kept, key=lambda i: m2[i]))
    return torch.tensor([i in kept for i in range(len(m2))]).view(log_w.shape)


def expected_weights(name: str, cfg) -> torch.Tensor:
    """The weight each rule puts on each token of WEIGHTS ([4, 6]; 0: masked)."""
    w = WEIGHTS
    inside = lambda low, high: (w >= low) & (w <= high)  # noqa: E731
    if name == "tis":
        return w.clamp(max=cfg.tis_cap)
    if name == "icepop":
        return w * inside(cfg.icepop_low, cfg.icepop_high)
    if name == "decoupled":
        return w * (w <= cfg.decoupled_cap)
    if name == "m2po":
        return w * (w <= cfg.decoupled_cap) * m2po_by_hand(w.log(), cfg.m2po_tau)
    if name == "mis":
        sequence = w.prod(dim=1, keepdim=True)
        inside_sequence = (sequence >= cfg.mis_low) & (sequence <= cfg.mis_high)
        return (sequence * inside_sequence).expand_as(w)
    raise AssertionError(name)


def dapo_loss(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """DAPO's token-mean loss at pi_theta = pi_old (every ratio 1, nothing clipped)."""
    return -(advantages[:, None] * weights).sum() / weights.numel()


WEIGHTED = [name for name in CORRECTIONS if name != "opsm"]


@pytest.mark.parametrize("name", WEIGHTED)
def test_each_token_weight_is_the_published_rule_and_the_loss_applies_it(tmp_path, name):
    trainer = trainer_of(tmp_path, name)
    cfg = tiny(tmp_path, name).correction
    output = scored(trainer)
    expected = expected_weights(name, cfg)
    weight = output["importance_sampling_ratio"].expand_as(expected)
    torch.testing.assert_close(weight, expected, atol=1e-4, rtol=1e-4)
    loss = trainer._compute_loss(trainer.model, output)
    torch.testing.assert_close(
        loss, dapo_loss(output["advantages"], expected), rtol=1e-4, atol=1e-5
    )
    changed = (expected == 0) | (expected == cfg.tis_cap) if name == "tis" else expected == 0
    share = trainer._metrics["train"]["correction/token_share"]
    assert share == [pytest.approx(changed.float().mean().item())]


def test_opsm_masks_the_drifted_sequence_of_negative_advantage(tmp_path):
    """Row 3: negative advantage and mean log(mu / pi_theta) = -log 0.9 = 0.105 > 0.03.
    Row 0 has a negative advantage too, but its mu is below pi_theta on average: kept."""
    trainer = trainer_of(tmp_path, "opsm")
    output = scored(trainer)
    advantages = output["advantages"]
    assert advantages[0] < 0 and advantages[3] < 0 < advantages[2]
    assert "importance_sampling_ratio" not in output  # a mask, no weight
    assert -math.log(0.9) > tiny(tmp_path, "opsm").correction.opsm_delta
    keep = torch.tensor([1.0, 1.0, 1.0, 0.0])[:, None].expand_as(WEIGHTS)
    loss = trainer._compute_loss(trainer.model, output)
    torch.testing.assert_close(loss, dapo_loss(advantages, keep), rtol=1e-4, atol=1e-5)
    assert trainer._metrics["train"]["correction/token_share"] == [pytest.approx(0.25)]


def test_rollverify_with_opsm_masks_the_same_sequence_on_the_ratio_over_mu(tmp_path):
    """The composition (sample level and loss level): mu stays the ratio's denominator, and
    OPSM's mask (by mu against pi_theta, not a weight) drops row 3 as it does for opsm: the
    loss is rollverify's with row 3's advantage zeroed (a masked row stays in the count)."""
    trainer = trainer_of(tmp_path, "rollverify-opsm")
    assert trainer.ratio_denominator == "behavior"
    output = scored(trainer)
    assert "importance_sampling_ratio" not in output
    torch.testing.assert_close(output["old_per_token_logps"], output["sampling_per_token_logps"])
    loss = trainer._compute_loss(trainer.model, output)
    reference = trainer_of(tmp_path / "rollverify", "rollverify")
    unmasked = scored(reference)
    assert unmasked["advantages"][3] < 0
    masked = dict(unmasked, advantages=unmasked["advantages"].clone())
    masked["advantages"][3] = 0.0
    torch.testing.assert_close(loss, reference._compute_loss(reference.model, masked))
    assert not torch.allclose(loss, reference._compute_loss(reference.model, unmasked))


@pytest.mark.parametrize(
    ("method", "denominator"),
    [("partial", "behavior"), ("partial-recomputed", "recomputed"), ("tis", "recomputed")],
)
def test_the_ratio_denominator_is_mu_or_the_recomputed_pi_old(tmp_path, method, denominator):
    """behavior: the loss's pi_old is mu (a stale token's ratio is pi_theta/mu, far from 1);
    recomputed: the weights before the update (ratio 1 at the first pass). The config's
    train.ratio_denominator overrides the method's (a correction refuses behavior: below)."""
    assert METHODS[method].denominator == denominator
    choices = (
        [None, "recomputed"] if METHODS[method].correction else [None, "behavior", "recomputed"]
    )
    for chosen in choices:
        trainer = trainer_of(tmp_path, method, **{"train.ratio_denominator": chosen})
        output = scored(trainer)
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        with torch.no_grad():
            pi, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, attention, WEIGHTS.shape[1]
            )
        old = output.get("old_per_token_logps", pi)  # TRL's None: the loss's own, detached
        ratio = (pi - old).exp()
        if (chosen or denominator) == "behavior":
            torch.testing.assert_close(old, output["sampling_per_token_logps"])
            torch.testing.assert_close(ratio, WEIGHTS, rtol=1e-4, atol=1e-4)
        else:
            torch.testing.assert_close(ratio, torch.ones_like(WEIGHTS), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", WEIGHTED)
def test_a_correction_refuses_the_behavior_denominator(tmp_path, name):
    """Each correction but opsm weights or masks by pi_old/mu: on the ratio pi_theta/mu that
    would count mu twice, so the config says so before anything runs. (opsm masks by mu
    against pi_theta: rollverify-opsm runs it on mu's ratio.)"""
    with pytest.raises(ConfigError, match=f"train.ratio_denominator: method {name} weights"):
        tiny(tmp_path, name, **{"train.ratio_denominator": "behavior"})


ON_POLICY = ["partial", "partial-recomputed", *CORRECTIONS]


def test_without_staleness_every_correction_trains_as_grpo(tmp_path):
    """mu = pi_old for every token: no weight, no mask, the same loss and gradient as grpo."""
    on_policy = torch.ones_like(WEIGHTS)
    reference = trainer_of(tmp_path / "grpo", "grpo", on_policy)
    grpo_output = scored(reference)
    grpo_loss = reference._compute_loss(reference.model, grpo_output)
    grpo_gradient = torch.autograd.grad(grpo_loss, list(reference.model.parameters()))
    for method in ON_POLICY:
        trainer = trainer_of(tmp_path / method, method, on_policy)
        output = scored(trainer)
        loss = trainer._compute_loss(trainer.model, output)
        torch.testing.assert_close(loss, grpo_loss, msg=method)
        gradient = torch.autograd.grad(loss, list(trainer.model.parameters()))
        for a, b in zip(gradient, grpo_gradient, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7, msg=method)


def test_m2po_drops_the_largest_second_moments_until_the_rest_is_below_tau():
    log_w = torch.tensor([[0.5, 0.1, -0.3, 0.0, 0.05, 9.0]])  # last: padding
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    zeros = torch.zeros_like(log_w)
    # m2 = 0.25, 0.01, 0.09, 0, 0.0025: mean 0.0705; without 0.25: 0.0256 < 0.04
    keep = m2po_mask(log_w, zeros, mask, tau=0.04)
    assert keep.tolist() == [[False, True, True, True, True, False]]
    # ... < 0.01 only without 0.25 and 0.09 as well (0.0125 / 3)
    keep = m2po_mask(log_w, zeros, mask, tau=0.01)
    assert keep.tolist() == [[False, True, False, True, True, False]]
    keep = m2po_mask(log_w, zeros, mask, tau=1e-9)  # never below: one token stays
    assert keep.sum() == 1 and keep[0, 3]


def test_m2po_keeps_dropping_while_the_rest_equals_tau():
    """Strictly below tau (AReaL's `<`): a rest whose mean m2 is exactly tau is not enough."""
    log_w = torch.tensor([[1.0, 0.5, -0.5, 0.0]])  # m2 = 1, 0.25, 0.25, 0: exact in binary
    mask = torch.ones_like(log_w, dtype=torch.long)
    # means of the rest, largest dropped first: 0.375, 0.5 / 3, 0.125, 0
    keep = m2po_mask(log_w, torch.zeros_like(log_w), mask, tau=0.125)
    assert keep.tolist() == [[False, False, False, True]]  # (with <=: the last two kept)


def test_the_mismatch_is_k3_and_the_effective_sample_size_of_pi_old_over_mu():
    ratios = torch.tensor([[1.0, 2.0, 0.5, 7.0]])  # last: padding
    mask = torch.tensor([[True, True, True, False]])
    k3, ess = mismatch(ratios.log(), torch.zeros_like(ratios), mask)
    # k3: 0, 2 - 1 - ln 2, 0.5 - 1 + ln 2 -> 0.5 / 3; ESS: 3.5^2 / (3 * 5.25)
    assert k3 == pytest.approx(0.5 / 3)
    assert ess == pytest.approx(3.5**2 / (3 * 5.25))
    assert mismatch(ratios.log(), ratios.log(), mask) == (pytest.approx(0.0), pytest.approx(1.0))


def test_rvctl_methods_says_which_denominator_and_correction_each_method_uses(monkeypatch, capsys):
    result = run_rvctl(["methods", "--format", "json"], monkeypatch, capsys)
    rows = {row["method"]: row for row in json.loads(result.stdout)}
    assert rows["partial"]["denominator"] == "behavior"
    assert rows["partial-recomputed"]["denominator"] == "recomputed"
    for name in CORRECTIONS:
        assert (rows[name]["denominator"], rows[name]["correction"]) == ("recomputed", name)


# ---- the peers' choices: the token count, M2PO's population, its clip (docs/rules.md, 6) ----

MASKING = [name for name in WEIGHTED if name != "tis"]  # a weight of 0 on some token


def kept_only(name: str, cfg) -> torch.Tensor:
    """bool [4, 6]: the tokens of WEIGHTS rule `name` leaves in the loss."""
    return expected_weights(name, cfg) != 0


@pytest.mark.parametrize("name", MASKING)
def test_a_masked_token_leaves_the_token_count_when_asked(tmp_path, name):
    """masked_tokens_in_count false (verl's count): dapo divides by the kept tokens, so the
    loss is the default's (every token counted) times tokens / kept."""
    settings = {"correction.masked_tokens_in_count": False}
    trainer = trainer_of(tmp_path, name, **settings)
    cfg = tiny(tmp_path, name, **settings).correction
    kept = kept_only(name, cfg)
    assert 0 < kept.sum() < kept.numel(), "the batch must mask some tokens and keep others"
    output = scored(trainer)
    loss = trainer._compute_loss(trainer.model, output)
    counted = dapo_loss(output["advantages"], expected_weights(name, cfg))
    torch.testing.assert_close(loss, counted * kept.numel() / kept.sum(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo"])
def test_every_loss_type_counts_only_the_kept_tokens_when_asked(tmp_path, loss_type):
    """grpo averages each sequence over its kept tokens (a sequence with none: 0), bnpo the
    batch over its kept tokens; the masked ones are out of TRL's mask."""
    settings = {"correction.masked_tokens_in_count": False, "train.loss_type": loss_type}
    trainer = trainer_of(tmp_path, "icepop", **settings)
    cfg = tiny(tmp_path, "icepop", **settings).correction
    output = scored(trainer)
    token_loss = -output["advantages"][:, None] * expected_weights("icepop", cfg)
    kept = kept_only("icepop", cfg)
    if loss_type == "grpo":
        expected = (token_loss.sum(1) / kept.sum(1).clamp(min=1)).mean()
    else:
        expected = token_loss.sum() / kept.sum()
    loss = trainer._compute_loss(trainer.model, output)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)


# Rows 0-1 on-policy, rows 2-3 drifted: over the whole batch the mean (log w)^2 is 0.025, below
# M2PO's 0.04, so nothing is masked; over rows 2-3 alone it is 0.049: their 0.7 and 1.4 go.
DRIFT_IN_ONE_PASS = torch.tensor(
    [
        [1.0] * 6,
        [1.0] * 6,
        [1.1, 1.2, 1.3, 1.4, 1.15, 1.25],
        [0.85, 0.8, 0.75, 0.9, 0.95, 0.7],
    ]
)
PASSES = ([0, 1], [2, 3])  # TRL's passes of train.micro_batch_size 2 (unshuffled here)


def m2po_passes(tmp_path, **settings) -> tuple:
    """m2po with AReaL's per-micro-batch mask, trained in TRL's two passes of 2 sequences
    (rows 0-1, 2-3); returns (trainer, output, the summed loss of the passes)."""
    from trl.trainer.utils import split_tensor_dict

    settings |= {"train.micro_batch_size": 2, "correction.m2po_scope": "micro_batch"}
    trainer = trainer_of(tmp_path, "m2po", DRIFT_IN_ONE_PASS, **settings)
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    output = scored(trainer)
    passes = split_tensor_dict(output, trainer.args.steps_per_generation)
    assert [len(p["advantages"]) for p in passes] == [2, 2]
    loss = sum(trainer._compute_loss(trainer.model, p) for p in passes)
    return trainer, output, loss


def test_m2po_per_micro_batch_masks_what_the_whole_batch_keeps(tmp_path):
    cfg = tiny(tmp_path, "m2po").correction
    w = DRIFT_IN_ONE_PASS
    whole = m2po_by_hand(w.log(), cfg.m2po_tau)
    per_pass = torch.cat([m2po_by_hand(w[rows].log(), cfg.m2po_tau) for rows in PASSES])
    assert whole.all() and per_pass.sum() == w.numel() - 2  # the two scopes differ here
    trainer, output, loss = m2po_passes(tmp_path)
    expected = dapo_loss(output["advantages"], w * per_pass)  # masked: still counted
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    shares = trainer._metrics["train"]["correction/token_share"]
    assert shares == [pytest.approx(0.0), pytest.approx(2 / 12)]  # each pass's own


def test_m2po_per_micro_batch_out_of_the_count_weighs_each_pass_as_areal(tmp_path):
    """AReaL: sum over micro-batches of (its tokens / all tokens) x the mean loss over the
    tokens M2PO kept in it (actor.py's loss_weight_fn; ppo_actor_loss_fn's loss_mask_count)."""
    settings = {"correction.masked_tokens_in_count": False}
    cfg = tiny(tmp_path, "m2po").correction
    _, output, loss = m2po_passes(tmp_path, **settings)
    token_loss = -output["advantages"][:, None] * DRIFT_IN_ONE_PASS
    expected = 0
    for rows in PASSES:
        kept = m2po_by_hand(DRIFT_IN_ONE_PASS[rows].log(), cfg.m2po_tau)
        share = kept.numel() / DRIFT_IN_ONE_PASS.numel()
        expected += share * (token_loss[rows] * kept).sum() / kept.sum()
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("clip", [True, False])
def test_m2po_without_its_clip_lets_a_ratio_beyond_one_plus_epsilon_count(tmp_path, clip):
    """Every token at ratio pi_theta / pi_old = 1.5 (w = 1: no weight, no mask). Clipped, a
    token of positive advantage counts 1 + epsilon_high; unclipped, 1.5."""
    trainer = trainer_of(
        tmp_path, "m2po", torch.ones_like(WEIGHTS), **{"correction.m2po_clip": clip}
    )
    output = scored(trainer)
    output["old_per_token_logps"] = output["old_per_token_logps"] - math.log(1.5)
    advantages = output["advantages"][:, None].expand_as(WEIGHTS)
    ratio = torch.full_like(WEIGHTS, 1.5)
    if clip:  # (negative advantages: PPO's max keeps 1.5 there)
        ratio = torch.where(advantages > 0, 1 + tiny(tmp_path, "m2po").train.epsilon_high, ratio)
    loss = trainer._compute_loss(trainer.model, output)
    torch.testing.assert_close(loss, -(advantages * ratio).mean(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("settings", "refused"),
    [
        ({"train.method": "opsm"}, "correction.masked_tokens_in_count: method opsm masks"),
        ({"train.loss_type": "dr_grpo"}, "correction.masked_tokens_in_count: train.loss_type"),
    ],
    ids=["opsm", "dr_grpo"],
)
def test_masked_tokens_out_of_the_count_is_refused_where_there_is_no_count(
    tmp_path, settings, refused
):
    method = settings.pop("train.method", "icepop")
    settings["correction.masked_tokens_in_count"] = False
    with pytest.raises(ConfigError, match=refused):
        tiny(tmp_path, method, **settings)
