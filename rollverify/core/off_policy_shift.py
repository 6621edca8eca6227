"""Off-Policy Shift (OPS): how far each cached token is from the current policy.

The rule: docs/rules.md, section 2. With c_t the current log-prob of token y_t and
b_t its behavior log-prob (the weights that sampled it), l_t = c_t - b_t and r_t = exp(l_t):

    abs_ratio      o_t = |r_t - 1|       (default; the paper's "importance-ratio offset")
    abs_log_ratio  o_t = |l_t|
    k3             o_t = r_t - 1 - l_t   (Schulman's k3 estimator of KL(mu || pi), >= 0)

Sequence OPS is the mean of o_t over a trajectory's generated tokens; 0 means on-policy.
"""

from __future__ import annotations

from typing import Literal

import torch

from rollverify.core.argument_checks import check_mask, check_same_shape

OpsMetric = Literal["abs_ratio", "abs_log_ratio", "k3"]
OPS_METRICS: tuple[str, ...] = ("abs_ratio", "abs_log_ratio", "k3")


def token_ops(
    current_logprobs: torch.Tensor,
    behavior_logprobs: torch.Tensor,
    metric: OpsMetric = "abs_ratio",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Token OPS o_t, float [B, T] -> [B, T] (same dtype as the inputs).

    With `mask` (bool [B, T], True on generated tokens) padded positions come out as 0 whatever
    the inputs hold there (NaN and inf included); without it they hold whatever the formula gives.
    """
    check_same_shape(current_logprobs=current_logprobs, behavior_logprobs=behavior_logprobs)
    if metric not in OPS_METRICS:
        raise ValueError(f"metric={metric!r} is unknown; use one of {', '.join(OPS_METRICS)}")
    log_ratio = current_logprobs - behavior_logprobs
    if metric == "abs_log_ratio":
        ops = log_ratio.abs()
    elif metric == "abs_ratio":
        ops = torch.expm1(log_ratio).abs()  # expm1: exact near 0, where on-policy tokens sit
    else:
        ops = torch.expm1(log_ratio) - log_ratio
    if mask is not None:
        check_mask(mask, ops.shape)
        ops = torch.where(mask, ops, torch.zeros((), dtype=ops.dtype))
    return ops


def sequence_ops(ops: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sequence OPS, the mean of o_t over each trajectory's generated tokens: [B, T] -> [B].

    mask: bool [B, T], True on generated tokens (right-padded). Padded values are ignored,
    NaN and inf included. An empty trajectory has no off-policy token: its OPS is 0.
    """
    check_mask(mask, ops.shape)
    total = torch.where(mask, ops, torch.zeros((), dtype=ops.dtype)).sum(dim=-1)
    length = mask.sum(dim=-1)
    return total / length.clamp(min=1).to(ops.dtype)
