"""Verification (the paper's two-stage check and its filters) and the peers' off-policy
corrections: the thresholds each applies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rollverify.config.field import at_least_one, config_field, positive, positive_or_auto
from rollverify.core.threshold_grid import DEFAULT_GRID, parse_point


def _grid_points(points: list) -> bool:
    try:
        labels = [parse_point(point)[0] for point in points]
    except ValueError:
        return False
    return len(set(labels)) == len(labels)  # each point once


@dataclass
class VerifyConfig:
    ops_metric: Literal["abs_ratio", "abs_log_ratio", "k3"] = config_field(
        "abs_ratio", "Token OPS: |r-1|, |log r| or k3 (spec)."
    )
    ds: float | Literal["auto"] = config_field(
        0.01,
        "Sequence-stage threshold on a segment's mean OPS; inf disables. The paper's 0.01; "
        "the acceptance it gives on the embedded default: docs/results.md. auto: "
        "drift_versions x the run's per-version drift, measured at each check (docs/rules.md, "
        "section 3, Thresholds in drift units).",
        positive_or_auto,
        "> 0 (inf allowed) or auto",
        allow_inf=True,
    )
    dt: float | Literal["auto"] = config_field(
        2.0,
        "Token-stage threshold on one token's OPS; inf disables. auto: 200 (the paper's "
        "2 / 0.01) x drift_versions x the per-version drift.",
        positive_or_auto,
        "> 0 (inf allowed) or auto",
        allow_inf=True,
    )
    drift_versions: float = config_field(
        2.0,
        "Read by ds/dt auto only: how many versions of the run's own drift a segment may carry "
        "(c of docs/rules.md, section 3).",
        positive,
        "> 0",
    )
    threshold_grid: list[float | str] = config_field(
        list(DEFAULT_GRID),
        "At every check, the acceptance each of these would have given on the same cache, "
        "logged as threshold_grid/<point> (rvctl report --thresholds, rvctl plan): a ds (with "
        "the run's dt, and _dt_scaled: dt = ds x 2/0.01) or auto:C (ds = C x the check's "
        "per-version drift, dt scaled; _dt_run: the run's dt). [] logs none "
        "(docs/rules.md, section 3).",
        _grid_points,
        "a list of ds > 0 and auto:C (C > 0)",
    )
    window: int = config_field(8, "Acceptance-rate window (cycles).", at_least_one, ">= 1")
    switch_threshold: float = config_field(
        0.5, "Switch to on-policy when the window mean is below.", lambda x: 0 < x <= 1, "in (0, 1]"
    )
    staleness_bound: int = config_field(
        2,
        "staleness-filter: drop samples staler than this many versions.",
        lambda x: x >= 0,
        ">= 0",
    )
    ops_bound: float = config_field(
        0.05, "ops-filter: drop samples whose sequence OPS exceeds this.", positive, "> 0"
    )


@dataclass
class CorrectionConfig:
    """The peers' off-policy corrections (rollverify/core/corrections.py), each a method of its own
    on partial rollout; defaults are the ones their code ships."""

    tis_cap: float = config_field(
        2.0,
        "tis: token weight min(pi_old/mu, C), C this (verl's and slime's 2; TRL's own default "
        "is 3).",
        lambda x: x >= 1,
        ">= 1",
    )
    mis_low: float = config_field(
        0.5,
        "mis: a sequence whose ratio prod_t pi_old/mu is below this is masked.",
        lambda x: 0 < x <= 1,
        "in (0, 1]",
    )
    mis_high: float = config_field(2.0, "mis: ... or above this.", lambda x: x >= 1, ">= 1")
    icepop_low: float = config_field(
        0.5,
        "icepop: a token whose pi_old/mu is below this is masked (IcePop's [0.5, 5]).",
        lambda x: 0 < x <= 1,
        "in (0, 1]",
    )
    icepop_high: float = config_field(5.0, "icepop: ... or above this.", lambda x: x >= 1, ">= 1")
    opsm_delta: float = config_field(
        0.03,
        "opsm: a sequence of negative advantage is masked when its mean over tokens of "
        "log mu - log pi_theta exceeds this (DeepSeek-V3.2's delta, TRL's "
        "off_policy_mask_threshold). The paper gives no value; 0.03 is AgileRL's default for "
        "the same mask (TRL's docs suggest 0.5, which a tiny model's drift never reaches).",
        positive,
        "> 0",
    )
    decoupled_cap: float = config_field(
        5.0,
        "decoupled and m2po: AReaL's behavior weight pi_prox/mu; tokens above this are masked "
        "(AReaL's rejection_sampling upper 5, action mask).",
        lambda x: x >= 1,
        ">= 1",
    )
    m2po_tau: float = config_field(
        0.04,
        "m2po: the tokens of largest (log mu - log pi_prox)^2 are masked until the mean of the "
        "rest is below this (AReaL's m2_threshold).",
        positive,
        "> 0",
    )
    masked_tokens_in_count: bool = config_field(
        True,
        "Whether a token a correction masks (weight 0: mis, icepop, decoupled, m2po) still counts "
        "in the loss's token count, as TRL's masks do. false: it leaves the count (every "
        "loss_type but dr_grpo, whose count is a constant), as verl's rejection masks leave "
        "response_mask; AReaL leaves out M2PO's mask, not its decoupled cap's (docs/rules.md, "
        "section 6). Refused false with opsm, whose mask TRL takes in the loss, after the count.",
    )
    m2po_scope: Literal["batch", "micro_batch"] = config_field(
        "batch",
        "m2po (like m2po_tau, read by m2po only): the population M2PO's mask ranks. batch: the "
        "process's share of the rollout batch, once before the step. micro_batch: each pass of "
        "train.micro_batch_size sequences in the loss, as AReaL masks each micro-batch; with "
        "masked_tokens_in_count false the pass then weighs as its tokens before the mask, "
        "AReaL's weighting. The two agree where one pass holds the share.",
    )
    m2po_clip: bool = config_field(
        True,
        "m2po (read by m2po only): keep PPO's clip of pi_theta/pi_old (train.epsilon, "
        "train.epsilon_high). false: no clip, the objective of AReaL's M2PO docs (its recipe "
        "sets eps_clip 0 with one update per batch).",
    )
