"""Sample filters on partial rollout (paper Section 3.3, Table 1): keep or drop completed samples.

staleness  = current version - version of the sample's oldest token; drop if > bound.
OPS        = the sample's sequence OPS under the current policy; drop if > bound.
A dropped sample gets no gradient and does not enter its group's reward baseline.
"""

from __future__ import annotations

import torch


def staleness(versions: torch.Tensor, mask: torch.Tensor, current_version: int) -> torch.Tensor:
    """current_version - oldest token version per sample: versions long [B, T], mask bool -> [B]."""
    oldest = torch.where(mask, versions, torch.iinfo(versions.dtype).max).amin(dim=-1)
    return torch.where(mask.any(-1), current_version - oldest, torch.zeros_like(oldest))


def token_staleness(
    versions: torch.Tensor, mask: torch.Tensor, current_version: int, old: int = 8
) -> tuple[float, float]:
    """(mean versions behind, share at least `old` versions behind) over the real tokens:
    versions long [B, T], mask bool [B, T]. What the loss trains on, token by token (a sample's
    staleness counts only its oldest token). (0.0, 0.0) without tokens."""
    behind = (current_version - versions)[mask].float()
    if behind.numel() == 0:
        return 0.0, 0.0
    return behind.mean().item(), (behind >= old).float().mean().item()


def keep_fresh(
    versions: torch.Tensor, mask: torch.Tensor, current_version: int, bound: int
) -> torch.Tensor:
    """bool [B]: samples whose staleness is within `bound` versions."""
    return staleness(versions, mask, current_version) <= bound


def keep_on_policy(sequence_ops: torch.Tensor, bound: float) -> torch.Tensor:
    """bool [B]: samples whose sequence OPS is within `bound` (NaN is dropped)."""
    return sequence_ops <= bound


def keep_samples(sample_filter, batch, sequence_ops: torch.Tensor, version: int, bounds):
    """bool [B]: the samples a method's sample filter keeps (None: all). batch: the padded
    trajectories (versions, mask); bounds: the verify config (staleness_bound, ops_bound)."""
    if sample_filter == "staleness":
        return keep_fresh(batch.versions, batch.mask, version, bounds.staleness_bound)
    if sample_filter == "ops":
        return keep_on_policy(sequence_ops, bounds.ops_bound)
    return torch.ones(batch.mask.shape[0], dtype=torch.bool)
