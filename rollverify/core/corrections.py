"""The peers' off-policy corrections, as TRL settings, and the one TRL does not ship (M2PO).

Partial rollout as verl and slime run it scores each batch once more before the step's first
update (pi_old, "recomputed") and puts that in the ratio's denominator: a token sampled by a
stale policy mu then looks on-policy to the clip. Each correction below keeps that ratio,
pi_theta / pi_old, and weights or masks a token by how far its sampler mu was from pi_old:

    tis        token weight min(pi_old/mu, C)                  TIS (verl, slime)
    mis        a sequence masked when prod_t pi_old/mu falls    MIS (verl's sequence-level
               outside [lo, hi]                                 rejection)
    icepop     a token masked when pi_old/mu falls outside      IcePop (Ling team)
               [lo, hi]
    opsm       a sequence of negative advantage masked when     DeepSeek-V3.2's off-policy
               mean_t(log mu - log pi_theta) > delta            sequence masking
    decoupled  weight pi_prox/mu, the token masked above a cap  AReaL's decoupled PPO
               (pi_prox = pi_old, the recomputed policy)
    m2po       decoupled, and the tokens of largest              M2PO, as AReaL ships it
               (log mu - log pi_prox)^2 masked until the mean    (examples/math/gsm8k_m2po.yaml)
               of the rest is below tau

TRL 1.16 implements the first five (`vllm_importance_sampling_mode` and `_clip_min/_max`,
`off_policy_mask_threshold`); the trainer (training/trl_adapter.py) switches them on and adds
`m2po_mask`. Defaults and their sources: config section `correction`. A masked token stays in
the loss's token count, as TRL's masks do, unless correction.masked_tokens_in_count is false
(`kept_tokens`: the count verl takes); m2po keeps PPO's clip unless correction.m2po_clip is false.
"""

from __future__ import annotations

import math
from typing import Any

import torch

CORRECTIONS = ("tis", "mis", "icepop", "opsm", "decoupled", "m2po")
MASKING = ("mis", "icepop", "decoupled", "m2po")  # a weight of 0 masks (TRL's *_mask modes)


def trl_settings(name: str | None, cfg) -> dict[str, Any]:
    """GRPOConfig fields for correction `name` (None: none) with the bounds of `cfg` (the
    config's correction section)."""
    off = {"vllm_importance_sampling_correction": False}
    if name is None:
        return off
    if name == "opsm":
        return off | {"off_policy_mask_threshold": cfg.opsm_delta}
    # M2PO unclipped (AReaL's docs' objective): TRL's clamp to [1 - inf, 1 + inf] is none.
    unclipped = {"epsilon": math.inf, "epsilon_high": math.inf}
    clip = unclipped if name == "m2po" and not cfg.m2po_clip else {}
    mode, low, high = {
        "tis": ("token_truncate", None, cfg.tis_cap),
        "mis": ("sequence_mask", cfg.mis_low, cfg.mis_high),
        "icepop": ("token_mask", cfg.icepop_low, cfg.icepop_high),
        "decoupled": ("token_mask", None, cfg.decoupled_cap),
        "m2po": ("token_mask", None, cfg.decoupled_cap),
    }[name]
    return clip | {
        "vllm_importance_sampling_correction": True,
        "vllm_importance_sampling_mode": mode,
        "vllm_importance_sampling_clip_min": low,
        "vllm_importance_sampling_clip_max": high,
    }


def kept_tokens(weight: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The tokens of `mask` [B, T] a correction left in the loss: weight [B, T] (a sequence's:
    [B, 1]) not 0. Same dtype as mask."""
    return mask * (weight != 0).to(mask.dtype)


def m2po_mask(
    behavior: torch.Tensor, proximal: torch.Tensor, mask: torch.Tensor, tau: float
) -> torch.Tensor:
    """bool [B, T]: the tokens M2PO keeps. behavior (log mu), proximal (log pi_prox): float
    [B, T]; mask: the loss's tokens [B, T]. The tokens of largest second moment
    m2 = (log mu - log pi_prox)^2 are dropped, largest first, until the mean m2 of the rest is
    below tau; at least one token is kept (AReaL's _get_m2po_loss_mask)."""
    mask = mask.bool()
    m2 = (behavior - proximal).float().pow(2)[mask]
    keep = torch.zeros_like(mask)
    if m2.numel() == 0:
        return keep
    order = torch.argsort(m2, descending=True, stable=True)
    ranked = m2[order]
    rest = ranked.flip(0).cumsum(0).flip(0)  # sum of ranked[i:]
    rest_mean = rest / torch.arange(len(ranked), 0, -1, dtype=rest.dtype)
    below = torch.nonzero(rest_mean < tau)
    dropped = int(below[0]) if len(below) else len(ranked) - 1
    kept = torch.ones_like(ranked, dtype=torch.bool)
    kept[order[:dropped]] = False
    keep[mask] = kept
    return keep


def changed_share(weight: torch.Tensor, mask: torch.Tensor, low, high) -> tuple[float, float]:
    """(tokens whose weight a truncation or mask set, tokens) over `mask`: a weight of 0
    (masked) or at a bound (truncated). weight: [B, T] or a sequence's [B, 1]."""
    mask = mask.bool()
    weight = weight.expand(mask.shape)
    changed = weight == 0
    for bound in (low, high):
        if bound is not None:
            changed |= weight == bound
    return float((changed & mask).sum()), float(mask.sum())


def mismatch(
    proximal: torch.Tensor, behavior: torch.Tensor, mask: torch.Tensor
) -> tuple[float, float]:
    """How far the samplers were from pi_old over the trained tokens: (mean k3, ESS).

    k3 = r - 1 - log r with r = pi_old / mu, per token: an unbiased estimate of KL(mu || pi_old)
    from mu's samples (Schulman's k3). ESS = (sum r)^2 / (n sum r^2), the effective share of
    n tokens that importance weights r leave (1: on-policy). proximal, behavior: float [B, T]."""
    mask = mask.bool()
    log_r = (proximal - behavior).double()[mask]
    if log_r.numel() == 0:
        return float("nan"), float("nan")
    r = log_r.exp()
    k3 = (r - 1 - log_r).mean().item()
    ess = (r.sum() ** 2 / (len(r) * (r**2).sum())).item()
    return k3, ess
