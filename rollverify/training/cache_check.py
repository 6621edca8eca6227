"""Check the cache after an update: score the cached unfinished trajectories under the new
policy and, for methods that verify, truncate each at its first off-policy segment or token
(rollverify/core/verify.py), count the acceptance rate and maybe switch
(rollverify/core/switching.py).
Methods that do not verify only measure the cache's OPS, for the logs."""

from __future__ import annotations

import math

import torch

from rollverify.config import VerifyConfig
from rollverify.core.auto_thresholds import AUTO, per_version_drift, thresholds
from rollverify.core.methods import Method
from rollverify.core.off_policy_shift import sequence_ops, token_ops
from rollverify.core.switching import AcceptanceMonitor
from rollverify.core.threshold_grid import grid_kept
from rollverify.core.verify import verify_stages
from rollverify.cost.trace import scoring_work
from rollverify.rollout.trajectory import PaddedTrajectories, Trajectory, TrajectoryCache
from rollverify.training.records import CacheCheck


def cached_unfinished(cache: TrajectoryCache) -> list[Trajectory]:
    """The trajectories a check scores: paused with tokens to keep or cut."""
    return [t for t in cache if not t.finished and len(t) > 0]


def check_cache(
    cached: list[Trajectory],
    current: torch.Tensor | None,
    method: Method,
    cfg: VerifyConfig,
    monitor: AcceptanceMonitor,
    step: int,
    version: int,
) -> CacheCheck:
    """`current`: log pi of `cached`'s tokens under the weights just updated, policy version
    `version` ([B, >= T], trl_adapter.py's current_logprobs; None for an empty cache)."""
    if not cached:
        return CacheCheck()
    batch = PaddedTrajectories.of(cached)
    policy = batch.policy  # tool output is neither scored nor counted (docs/rules.md, 3)
    current = current[:, : batch.mask.shape[1]]
    ops = token_ops(current, batch.behavior_logprobs, cfg.ops_metric, mask=policy)
    lengths = batch.mask.sum(-1)
    after_sequence = kept = lengths
    auto = AUTO in (cfg.ds, cfg.dt)
    measured = auto or any(str(p).startswith(AUTO) for p in cfg.threshold_grid)
    drift = per_version_drift(ops, batch.versions, policy, version) if measured else None
    ds, dt = thresholds(cfg.ds, cfg.dt, cfg.drift_versions, drift) if auto else (cfg.ds, cfg.dt)
    dt = dt if method.token_stage or not method.verify else math.inf
    # what each threshold of the grid would have kept of this same cache (before any cut)
    grid = grid_kept(ops, batch.versions, batch.mask, policy, cfg.threshold_grid, dt, drift)
    if method.verify:
        after_sequence, kept = verify_stages(ops, batch.versions, batch.mask, ds, dt, policy)
        for trajectory, k in zip(cached, kept.tolist(), strict=True):
            trajectory.truncate(k)
    columns = torch.arange(batch.mask.shape[1])
    kept_policy = policy & (columns < kept[:, None])
    before, after = int(policy.sum()), int(kept_policy.sum())
    cut_by_tokens = int((policy & (columns < after_sequence[:, None])).sum()) - after
    if method.verify and method.switching:
        monitor.update(after, before, step=step)
    nonempty = kept_policy.any(-1)
    return CacheCheck(
        trajectories=len(cached),
        tokens_before=before,
        tokens_kept=after,
        tokens_cut_token_stage=cut_by_tokens,
        ops_before=sequence_ops(ops, policy).mean().item(),
        ops_after=(
            sequence_ops(ops, kept_policy)[nonempty].mean().item() if nonempty.any() else math.nan
        ),
        scored=forward_work(cached),
        auto=(ds, dt, drift) if auto and drift is not None else None,
        grid=grid,
    )


def forward_work(trajectories: list[Trajectory]) -> tuple[int, int]:
    """(tokens, attended) of one forward over prompt + generated tokens of each trajectory."""
    return scoring_work([len(t.prompt_ids) for t in trajectories], [len(t) for t in trajectories])
