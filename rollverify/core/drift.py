"""How far one update moves the policy, in the units verification judges it by: over the trained
tokens sampled exactly one version before the policy that scores them, their mean token OPS
(the spec's o_t, off_policy_shift.py) and their mean k3 (corrections.py `mismatch`). With ds and
dt absolute OPS thresholds, this per-version drift says how many updates a cached token survives
(issue "What RollVerify buys per GPU-day saved": drift/ds against the switch step)."""

from __future__ import annotations

import torch

from rollverify.core.corrections import mismatch


def version_drift(
    ops: torch.Tensor,
    proximal: torch.Tensor,
    behavior: torch.Tensor,
    versions: torch.Tensor,
    mask: torch.Tensor,
    version: int,
) -> tuple[float, float]:
    """(mean token OPS, mean k3) over the tokens of `mask` sampled by version `version - 1`:
    ops float [B, T] (token OPS of proximal against behavior), proximal and behavior float
    [B, T] log-probs, versions long [B, T] (the version that sampled each token), mask bool
    [B, T]; `version`: the version whose log-probs `proximal` holds (its own fresh tokens are
    0 behind). NaN, NaN without such tokens (an on-policy batch has none)."""
    one_behind = mask.bool() & (versions == version - 1)
    if not one_behind.any():
        return float("nan"), float("nan")
    return ops[one_behind].double().mean().item(), mismatch(proximal, behavior, one_behind)[0]
