"""The trainer's side of `rvctl simulate`, priced: a training pass over a batch, a
forward-only pass (verification's scoring), a weight sync; on a GPU by the cost model
(rollverify/cost/costmodel/), or by a fitted profile's terms (rvctl calibrate). And the model
of what verification keeps: the share `acceptance` of every trajectory it checks."""

from __future__ import annotations

import math

from rollverify.core.methods import Method
from rollverify.core.switching import AcceptanceMonitor
from rollverify.cost.costmodel import Pricing, prefill_seconds, sync_seconds, train_seconds
from rollverify.cost.trace import scoring_work
from rollverify.experiments.simulate_settings import Settings
from rollverify.rollout.engines.sketch import Sketch
from rollverify.rollout.schedules import RolloutState


def trainer_seconds(
    settings: Settings, pricing: Pricing, trajectories: list[Sketch], backward: bool = True
) -> float:
    """The trainer over `trajectories`: a training pass, or (`backward` False) a forward-only
    one."""
    tokens, attended = _work(trajectories)
    if settings.profile:
        fitted = settings.profile.train_seconds if backward else settings.profile.score_seconds
        return fitted(tokens, attended)
    priced = train_seconds if backward else prefill_seconds
    gpus = pricing.layout.trainer_gpus
    return priced(pricing.shape, pricing.gpu, pricing.efficiency, tokens, attended, gpus)


def weight_sync_seconds(settings: Settings, pricing: Pricing) -> float:
    if settings.profile and settings.profile.has("sync_per_byte"):
        return settings.profile.sync_seconds(pricing.shape.weight_bytes)
    return sync_seconds(pricing.shape.weight_bytes, pricing.gpu, pricing.efficiency, pricing.layout)


def verify_cache(
    settings: Settings,
    method: Method,
    state: RolloutState,
    monitor: AcceptanceMonitor,
    step: int,
    pricing: Pricing,
) -> float:
    """One verification cycle on the cache: keep `acceptance` of every cached trajectory, feed
    the monitor; returns the seconds of scoring the cache forward-only."""
    cached = [t for t in state.cache if not t.finished and len(t) > 0]
    if not cached:
        return 0.0
    seconds = trainer_seconds(settings, pricing, cached, backward=False)  # (before truncation)
    before = sum(len(t) for t in cached)
    kept = truncate_to_acceptance(settings, step, cached)
    if method.switching:
        monitor.update(sum(kept), before, step=step)
    return seconds


def truncate_to_acceptance(settings: Settings, step: int, trajectories: list) -> list[int]:
    """Keep the share `acceptance` (at `step`) of each trajectory's tokens; what each kept."""
    acceptance = settings.acceptance[min(step, len(settings.acceptance)) - 1]
    kept = [math.floor(acceptance * len(t)) for t in trajectories]
    for trajectory, k in zip(trajectories, kept, strict=True):
        trajectory.truncate(k)
    return kept


def _work(trajectories: list[Sketch]) -> tuple[int, int]:
    prompts = [t.prompt_tokens for t in trajectories]  # (len() of a tensor: 1,024 per step)
    return scoring_work(prompts, [t.length for t in trajectories])
