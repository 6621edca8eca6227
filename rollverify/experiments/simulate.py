"""`rvctl simulate`: what a method would cost on GPUs at a scale no CPU can run, in seconds.

    rvctl simulate --config experiments/qwen3-8b-dapo-math.yaml --context 8192,65536

For each (method, context, seed) the run's real schedules run against SimulatedEngine (a
virtual clock priced by the cost model, rollverify/cost/costmodel/), unchanged:
- `rollout.collect`: synchronous or partial rollout;
- the verification cycle's truncation of the cache (`Trajectory.truncate`);
- the acceptance monitor and its one-way switch.
The trainer's work is priced from the tokens of each batch. Evaluations and scoring for the
logs are left out.

What it cannot know is modeled, and each model is named here:
- **Response lengths** (`LengthModel`): lognormal, cut at the context (the response budget).
  The default median is 1,500 tokens with sigma 0.9: long-CoT math, whose median response at an
  8K budget is ~1-2K tokens (DAPO, Yu et al. 2025, Fig. 4b) with a long tail. About 3% hit an
  8K budget; at 64K the tail reaches ~30K in a batch of 1,024. The lengths can also come from a
  run's own trace (`--lengths-from RUN`). The median can move over the run: from the start
  median to `--end-median` (linearly or log-linearly), or a run's median per step
  (`--medians-from RUN`). The budget cuts every draw; the table counts the cut share.
- **Acceptance**: each verification cycle keeps the fraction `acceptance` of every cached
  trajectory, so the rate the monitor sees (kept / cached tokens, the spec's) is exactly that.
  The default is 0.95: the embedded default ends `make demo` at 0.94 (ds = 0.01). It can also
  follow a run's measured curve step by step (`--acceptance-from RUN`), so that the switch
  happens where it did. Truncation compounds: a trajectory resumed n times keeps
  acceptance^n of its older tokens, so a low acceptance at long contexts makes the longest
  trajectories regenerate much of themselves (see docs/cost-model.md).
- **Prompts**: `prompt_tokens` each (default 256).
- **Tool calls** (`--tool-calls`, off by default): where responses call a tool, how long it
  takes and what it returns (rollverify/cost/tool_latency.py).
"""

from __future__ import annotations

import gc
import math
import statistics
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import torch

from rollverify.config import RunConfig
from rollverify.core.methods import METHODS
from rollverify.core.switching import AcceptanceMonitor
from rollverify.cost.costmodel import (
    GPUS,
    Layout,
    ModelShape,
    Pricing,
    prefill_seconds,
    sync_seconds,
    train_seconds,
)
from rollverify.cost.kv_cache import BLOCK_SIZE
from rollverify.cost.trace import scoring_work
from rollverify.experiments.simulate_settings import Settings, check_fits, kv_tokens
from rollverify.experiments.workers import worker_context
from rollverify.rollout.async_rollout import AsyncState, next_batch
from rollverify.rollout.engines.simulated import SimulatedEngine, Sketch
from rollverify.rollout.engines.simulated_compiled import CompiledSimulatedEngine
from rollverify.rollout.schedules import PromptGroup, RolloutState, collect
from rollverify.rollout.trajectory import Trajectory


@dataclass
class Result:
    """One simulated run; the table's row (json keys) without the speedup."""

    method: str
    context: int
    gpu: str
    seed: int
    seconds: dict[str, float]  # modeled wall seconds by phase
    gpus: int
    slot_utilization: float
    tokens_generated: int
    tokens_regenerated: int
    switch_step: int | None
    prefill_seconds: float = 0.0  # of the rollout seconds, prefills (resumed ones too)
    trained: int = 0  # trajectories trained on
    truncated: int = 0  # of those, cut at the response budget (finish reason "length")
    preemptions: int = 0  # rows the KV cache could not hold (recomputed when they return)
    tokens_recomputed: int = 0  # prompt + generated tokens those rows prefilled again
    staleness_max: int = 0  # the most versions a trained token lagged the policy training it
    tool_calls: int = 0  # calls the responses made (--tool-calls)
    wall_seconds: float | None = None  # asynchronous: engines and trainer overlap (else the sum)

    @property
    def wall(self) -> float:
        return sum(self.seconds.values()) if self.wall_seconds is None else self.wall_seconds

    @property
    def gpu_days(self) -> float:
        return self.wall * self.gpus / 86_400

    @property
    def rollout_share(self) -> float:
        """Rollout seconds over the wall (asynchronous: the engines' busy share, whose idle
        rest is waiting for the trainer)."""
        return self.seconds["rollout"] / self.wall if self.wall else math.nan


@dataclass(frozen=True)
class _SketchGroup(PromptGroup):
    def samples(self, group_size: int) -> list[Trajectory]:
        return Sketch.group(self.prompt_ids, self.group_id, group_size)


class _Prompts:
    """Groups 0, 1, 2, ... with prompts of a fixed length (their content is never read), whose
    samples are Sketches."""

    def __init__(self, tokens: int) -> None:
        self.prompt = torch.zeros(tokens, dtype=torch.long)
        self.next_id = 0

    def next_group(self) -> PromptGroup:
        group = _SketchGroup(self.next_id, self.prompt, answer="")
        self.next_id += 1
        return group


def simulate_one(
    config: RunConfig, settings: Settings, method_name: str, context: int, seed: int
) -> Result:
    """One method at one context: `settings.steps` steps of its schedule on the virtual clock."""
    method, rollout, steps = METHODS[method_name], config.rollout, settings.steps
    pricing = Pricing(
        ModelShape.of(config.model_path(), revision=config.model.revision),
        GPUS[settings.gpu],
        Layout.of(config),
    )
    engine = _engine(config, settings, context, seed, pricing)
    lengths = engine.lengths
    source, state = _Prompts(settings.prompt_tokens), RolloutState()
    monitor = AcceptanceMonitor(config.verify.window, config.verify.switch_threshold)
    seconds = dict.fromkeys(("rollout", "train", "verify", "sync"), 0.0)
    layout = pricing.layout
    trained = truncated = staleness = 0
    for step in range(1, steps + 1):
        lengths.step = step  # groups first drawn now get this step's median
        started = engine.clock
        result = collect(
            engine,
            source,
            state,
            batch_groups=rollout.batch_groups,
            group_size=rollout.group_size,
            partial=method.partial and not monitor.switched,
            max_inflight_groups=rollout.max_inflight_groups,
        )
        seconds["rollout"] += engine.clock - started
        batch = list(result.trajectories())
        trained += len(batch)
        truncated += sum(t.finish_reason == "length" for t in batch)
        staleness = max(staleness, _lag(batch, step - 1))
        seconds["train"] += _train_seconds(settings, pricing, batch)
        if method.verify:
            seconds["verify"] += _verify(config, settings, method, state, monitor, step, pricing)
        seconds["sync"] += _sync_seconds(settings, pricing)
        engine.load_weights([], version=step)
    return _result(
        method_name, context, seed, settings, engine, seconds, layout.gpus, monitor.switch_step,
        trained=trained, truncated=truncated, staleness=staleness,
    )  # fmt: skip


def simulate_async(
    config: RunConfig,
    settings: Settings,
    eta: int,
    context: int,
    seed: int,
    verify: bool = False,
) -> Result:  # (check_fits refuses a layout without overlap)
    """Asynchronous training at staleness bound `eta` (rollverify/rollout/async_rollout.py):
    the engines generate all the time; the trainer trains each batch as soon as it exists and
    its previous step is done, then sends the weights, which the engines load in flight.
    Engines and trainer hold GPUs of their own (disaggregated), so the run lasts until the
    later of the two clocks and every GPU is paid for all of it.

    `verify`: before a batch is trained, each of its trajectories with tokens older than the
    policy is verified (the trainer scores it forward-only) and keeps the share `acceptance`
    of its tokens; a truncated one goes back to the engines to regenerate its suffix and its
    group waits. When the acceptance window collapses, admission becomes synchronous
    (eta 0) while the groups in play keep their deadlines."""
    rollout, steps = config.rollout, settings.steps
    pricing = Pricing(
        ModelShape.of(config.model_path(), revision=config.model.revision),
        GPUS[settings.gpu],
        Layout.of(config),
    )
    engine = _engine(config, settings, context, seed, pricing, in_flight=True)
    lengths = engine.lengths
    source, state = _Prompts(settings.prompt_tokens), AsyncState()
    seconds = dict.fromkeys(("rollout", "train", "verify", "sync"), 0.0)
    trainer_free = 0.0  # virtual time the trainer finishes its last step and sync
    trained = truncated = staleness = 0
    monitor = AcceptanceMonitor(config.verify.window, config.verify.switch_threshold)
    scoring = {"step": 1, "seconds": 0.0}  # the verification of the step in progress

    def check(trajectories: list[Trajectory], version: int) -> list[Trajectory]:
        stale = [t for t in trajectories if _oldest(t, version) < version]
        if not stale:
            return []
        scoring["seconds"] += _score_seconds(settings, pricing, stale)
        lengths = [len(t) for t in stale]
        kept = _truncate_to_acceptance(settings, scoring["step"], stale)
        monitor.update(sum(kept), sum(lengths), step=scoring["step"])
        return [t for t, n, k in zip(stale, lengths, kept, strict=True) if k < n]

    for step in range(1, steps + 1):
        lengths.step = step
        scoring.update(step=step, seconds=0.0)
        before, idle = engine.clock, engine.idle_seconds
        result = next_batch(
            engine,
            source,
            state,
            batch_groups=rollout.batch_groups,
            group_size=rollout.group_size,
            eta=eta,
            version=step - 1,
            wait_for_weights=engine.wait_for_weights,
            verify=check if verify else None,
            admit_eta=0 if monitor.switched else eta,
            in_start_order=rollout.batch_order == "start",
        )
        # the engines' busy time, overlapping training (waiting for weights is not rollout)
        seconds["rollout"] += engine.clock - before - (engine.idle_seconds - idle)
        batch = list(result.trajectories())
        trained += len(batch)
        truncated += sum(t.finish_reason == "length" for t in batch)
        staleness = max(staleness, _lag(batch, step - 1))
        train = _train_seconds(settings, pricing, batch)
        sync = _sync_seconds(settings, pricing)
        seconds["train"] += train
        seconds["sync"] += sync
        seconds["verify"] += scoring["seconds"]
        trained_at = max(engine.clock, trainer_free) + scoring["seconds"] + train
        trainer_free = trained_at + sync
        engine.schedule_weights(
            step, at=trained_at, seconds=sync, recompute_kv=not settings.keep_kv
        )
    wall = max(engine.clock, trainer_free)
    name = f"async{'-verify' if verify else ''}-eta{eta}" + ("-keep-kv" if settings.keep_kv else "")
    return _result(
        name, context, seed, settings, engine, seconds, pricing.layout.gpus, monitor.switch_step,
        trained=trained, truncated=truncated, staleness=staleness, wall=wall,
    )  # fmt: skip


def _result(
    method: str,
    context: int,
    seed: int,
    settings: Settings,
    engine: SimulatedEngine,
    seconds: dict[str, float],
    gpus: int,
    switch_step: int | None,
    *,
    trained: int,
    truncated: int,
    staleness: int,
    wall: float | None = None,
) -> Result:
    """A simulated run's row: what the schedule counted and what the engine's stats say."""
    stats = engine.stats
    return Result(
        method=method,
        context=context,
        gpu=settings.profile.machine if settings.profile else settings.gpu,
        seed=seed,
        seconds=seconds,
        gpus=gpus,
        slot_utilization=stats.utilization(engine.slots),
        tokens_generated=stats.tokens_generated,
        tokens_regenerated=stats.tokens_regenerated,
        switch_step=switch_step,
        prefill_seconds=engine.prefill_seconds,
        trained=trained,
        truncated=truncated,
        preemptions=stats.preemptions,
        tokens_recomputed=stats.tokens_recomputed,
        staleness_max=staleness,
        wall_seconds=wall,
        tool_calls=engine.calls_made,
    )


def _lag(batch: list[Trajectory], version: int) -> int:
    """The most versions a trajectory of `batch` lags `version` (by its oldest token)."""
    oldest = [t.oldest_version for t in batch if getattr(t, "oldest_version", None) is not None]
    return version - min(oldest) if oldest else 0


def _oldest(trajectory: Trajectory, default: int) -> int:
    oldest = getattr(trajectory, "oldest_version", None)
    return default if oldest is None else oldest


def _engine(
    config, settings, context, seed, pricing, in_flight: bool = False
) -> SimulatedEngine | CompiledSimulatedEngine:
    """The run's engine: compiled, unless it needs the Python engine's other parts (tool
    calls, weights loaded in flight, a fitted profile's prices)."""
    common = dict(
        slots=config.rollout.slots,
        max_new_tokens=context,
        lengths=settings.lengths.sampler(config.rollout.group_size, context, seed, settings.steps),
        admit_batch=1,  # vLLM admits into every free slot at once
        finishes_per_poll=settings.finishes_per_poll or max(1, config.rollout.slots // 64),
        kv_tokens=kv_tokens(config, settings, context, pricing.shape)
        if settings.kv_cache
        else None,
        block_size=config.vllm.block_size or BLOCK_SIZE,
    )
    if settings.compiled and not (in_flight or settings.tool_calls or settings.profile):
        return CompiledSimulatedEngine(pricing, **common)
    return SimulatedEngine(
        settings.profile.step_cost() if settings.profile else pricing,
        tool_calls=settings.tool_calls.sampler(seed) if settings.tool_calls else None,
        **common,
    )


def _train_seconds(settings: Settings, pricing: Pricing, batch: list) -> float:
    tokens, attended = _work(batch)
    if settings.profile:
        return settings.profile.train_seconds(tokens, attended)
    return train_seconds(
        pricing.shape,
        pricing.gpu,
        pricing.efficiency,
        tokens,
        attended,
        pricing.layout.trainer_gpus,
    )


def _score_seconds(settings: Settings, pricing: Pricing, trajectories: list) -> float:
    """A forward-only pass of the trainer over `trajectories` (verification's scoring)."""
    tokens, attended = _work(trajectories)
    if settings.profile:
        return settings.profile.score_seconds(tokens, attended)
    return prefill_seconds(
        pricing.shape,
        pricing.gpu,
        pricing.efficiency,
        tokens,
        attended,
        pricing.layout.trainer_gpus,
    )


def _sync_seconds(settings: Settings, pricing: Pricing) -> float:
    if settings.profile and settings.profile.has("sync_per_byte"):
        return settings.profile.sync_seconds(pricing.shape.weight_bytes)
    return sync_seconds(pricing.shape.weight_bytes, pricing.gpu, pricing.efficiency, pricing.layout)


def _verify(config, settings, method, state, monitor, step, pricing) -> float:
    """One verification cycle on the cache: keep `acceptance` of every cached trajectory, feed
    the monitor; returns the seconds of scoring the cache forward-only."""
    cached = [t for t in state.cache if not t.finished and len(t) > 0]
    if not cached:
        return 0.0
    seconds = _score_seconds(settings, pricing, cached)  # (before truncation)
    before = sum(len(t) for t in cached)
    kept = _truncate_to_acceptance(settings, step, cached)
    if method.switching:
        monitor.update(sum(kept), before, step=step)
    return seconds


def _truncate_to_acceptance(settings: Settings, step: int, trajectories: list) -> list[int]:
    """Keep the share `acceptance` (at `step`) of each trajectory's tokens; what each kept."""
    acceptance = settings.acceptance[min(step, len(settings.acceptance)) - 1]
    kept = [math.floor(acceptance * len(t)) for t in trajectories]
    for trajectory, k in zip(trajectories, kept, strict=True):
        trajectory.truncate(k)
    return kept


def _work(trajectories: list[Sketch]) -> tuple[int, int]:
    prompts = [t.prompt_tokens for t in trajectories]  # (len() of a tensor: 1,024 per step)
    return scoring_work(prompts, [t.length for t in trajectories])


def simulate(
    config: RunConfig,
    settings: Settings,
    on_result: Callable[[Result], None] = lambda r: None,
    workers: int = 1,
) -> list[Result]:
    """Every (context, seed, method) run and every asynchronous one, in the table's order.
    `workers` > 1 runs them in that many processes at once: each run is deterministic, so the
    results are the same; `on_result` then sees them as they finish."""
    settings.check()
    check_fits(config, settings)
    jobs = list(_jobs(settings))
    if workers <= 1 or len(jobs) == 1:
        results = []
        for job in jobs:
            results.append(_run(config, settings, job))
            on_result(results[-1])
        return results
    done: list[Result | None] = [None] * len(jobs)
    with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=worker_context()) as pool:
        futures = {pool.submit(_run, config, settings, job): i for i, job in enumerate(jobs)}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            on_result(done[futures[future]])
    return [r for r in done if r is not None]


_Job = tuple[str, int, int, int, bool]  # (method or "async", context, seed, eta, verify)


def _jobs(settings: Settings) -> Iterator[_Job]:
    for context in settings.contexts:
        for seed in range(settings.seeds):
            for method in settings.methods:
                yield method, context, seed, 0, False
            for eta in settings.asyncs:
                for verify in (False, True) if settings.async_verify else (False,):
                    yield "async", context, seed, eta, verify


def _run(config: RunConfig, settings: Settings, job: _Job) -> Result:
    method, context, seed, eta, verify = job
    # A run makes millions of short-lived objects and next to no cycles (7 in 100 steps of the
    # paper's setting): the garbage collector's passes (over torch's objects too) only cost time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        if method == "async":
            return simulate_async(config, settings, eta, context, seed, verify)
        return simulate_one(config, settings, method, context, seed)
    finally:
        if collecting:
            gc.enable()


def rows(results: list[Result]) -> list[dict[str, Any]]:
    """The cost table: one row per (method, context), means over seeds; speedup vs grpo at the
    same context."""
    groups: dict[tuple[str, int], list[Result]] = {}
    for result in results:
        groups.setdefault((result.method, result.context), []).append(result)
    table = []
    for (method, context), group in groups.items():
        switches = [r.switch_step for r in group if r.switch_step is not None]
        table.append(
            {
                "method": method,
                "context": context,
                "gpu": group[0].gpu,
                "gpu_days": statistics.fmean(r.gpu_days for r in group),
                "speedup_vs_grpo": None,
                "rollout_share": statistics.fmean(r.rollout_share for r in group),
                "slot_utilization": statistics.fmean(r.slot_utilization for r in group),
                "tokens_generated": round(statistics.fmean(r.tokens_generated for r in group)),
                "tokens_regenerated": round(statistics.fmean(r.tokens_regenerated for r in group)),
                "switch_step": statistics.median(switches) if switches else None,
                "truncated_share": sum(r.truncated for r in group)
                / max(1, sum(r.trained for r in group)),
                "staleness_max": max(r.staleness_max for r in group),
                "preemptions": round(statistics.fmean(r.preemptions for r in group)),
                "tokens_recomputed": round(statistics.fmean(r.tokens_recomputed for r in group)),
                "tool_calls": round(statistics.fmean(r.tool_calls for r in group)),
            }
        )
    for row in table:
        grpo = next(
            (r for r in table if r["method"] == "grpo" and r["context"] == row["context"]), None
        )
        if grpo is not None and row["gpu_days"]:
            row["speedup_vs_grpo"] = grpo["gpu_days"] / row["gpu_days"]
    return table
