"""Check the rollout batch before the update (rank 0), as cache_check.py checks the cache after
it: its tokens' OPS under the current policy (pi_old), the method's sample filter
(rollverify/core/filters.py), how stale its tokens are and how far its samplers were from
pi_old (rollverify/core/corrections.py), into the rollout phase's record."""

from __future__ import annotations

import torch

from rollverify.config import VerifyConfig
from rollverify.core.corrections import mismatch
from rollverify.core.drift import version_drift
from rollverify.core.filters import keep_samples, staleness, token_staleness
from rollverify.core.methods import Method
from rollverify.core.off_policy_shift import sequence_ops, token_ops
from rollverify.cost.trace import EngineStep
from rollverify.rollout.schedules import RolloutResult
from rollverify.rollout.tool_calls import ToolStats
from rollverify.rollout.trajectory import PaddedTrajectories, Trajectory
from rollverify.training.guards import require_finite
from rollverify.training.records import BatchRecord


def check_batch(
    result: RolloutResult,
    trajectories: list[Trajectory],
    current: torch.Tensor,
    method: Method,
    cfg: VerifyConfig,
    version: int,
    *,
    cache_size: int,
    engine_restarts: int,
    engine_steps: list[EngineStep],
    tool_calls: ToolStats | None,
) -> BatchRecord:
    """The batch's record. current: log pi_old of its tokens, float [B*G, >= T]; version: the
    policy trained next; the rest as BatchRecord has it."""
    batch = PaddedTrajectories.of(trajectories)
    require_finite("behavior log-probs from the engine", batch.behavior_logprobs, batch.mask)
    current = current[:, : batch.mask.shape[1]]
    require_finite("log-probs under the current policy", current, batch.mask)
    policy = batch.policy  # tool output is not the policy's: out of OPS and its metrics
    ops = token_ops(current, batch.behavior_logprobs, cfg.ops_metric, policy)
    batch_ops = sequence_ops(ops, policy)
    keep = keep_samples(method.sample_filter, batch, batch_ops, version, cfg)
    stale = staleness(batch.versions, batch.mask, version)
    return BatchRecord(
        result=result,
        trajectories=trajectories,
        keep=keep,
        ops=batch_ops,
        lengths=batch.mask.sum(-1).float(),
        staleness_mean=stale.float().mean().item(),
        staleness_max=int(stale.max()),
        token_staleness=token_staleness(batch.versions, policy, version),
        mismatch=mismatch(current, batch.behavior_logprobs, policy),  # current = pi_old
        drift=version_drift(ops, current, batch.behavior_logprobs, batch.versions, policy, version),
        cache_size=cache_size,
        engine_restarts=engine_restarts,
        engine_steps=engine_steps,
        tool_calls=tool_calls,
    )
