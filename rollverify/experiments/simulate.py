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
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

import torch

from rollverify.config import RunConfig
from rollverify.core.methods import METHODS
from rollverify.core.switching import AcceptanceMonitor
from rollverify.cost.costmodel import (
    Pricing,
)
from rollverify.experiments.simulate_results import Result, Trained, result_of
from rollverify.experiments.simulate_settings import Settings, check_fits, kv_tokens
from rollverify.experiments.simulate_trainer import (
    trainer_seconds,
    truncate_to_acceptance,
    verify_cache,
    weight_sync_seconds,
)
from rollverify.experiments.workers import worker_context
from rollverify.rollout.async_rollout import AsyncState, next_batch
from rollverify.rollout.engines.simulated import SimulatedEngine, Sketch
from rollverify.rollout.engines.simulated_compiled import CompiledSimulatedEngine
from rollverify.rollout.schedules import PromptGroup, RolloutState, collect
from rollverify.rollout.trajectory import Trajectory
from rollverify.training.cost_settings import run_pricing


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
    pricing = _pricing(config, settings)
    engine = _engine(config, settings, context, seed, pricing)
    lengths = engine.lengths
    source, state = _Prompts(settings.prompt_tokens), RolloutState()
    monitor = AcceptanceMonitor(config.verify.window, config.verify.switch_threshold)
    seconds = dict.fromkeys(("rollout", "train", "verify", "sync"), 0.0)
    trained = Trained()
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
        trained.add(batch, step - 1)
        seconds["train"] += trainer_seconds(settings, pricing, batch)
        if method.verify:
            seconds["verify"] += verify_cache(settings, method, state, monitor, step, pricing)
        seconds["sync"] += weight_sync_seconds(settings, pricing)
        engine.load_weights([], version=step)
    gpus, switch = pricing.layout.gpus, monitor.switch_step
    return result_of(method_name, context, seed, settings, engine, seconds, gpus, switch, trained)


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
    pricing = _pricing(config, settings)
    engine = _engine(config, settings, context, seed, pricing, in_flight=True)
    lengths = engine.lengths
    source, state = _Prompts(settings.prompt_tokens), AsyncState()
    seconds = dict.fromkeys(("rollout", "train", "verify", "sync"), 0.0)
    trainer_free = 0.0  # virtual time the trainer finishes its last step and sync
    trained = Trained()
    monitor = AcceptanceMonitor(config.verify.window, config.verify.switch_threshold)
    scoring = {"step": 1, "seconds": 0.0}  # the verification of the step in progress

    def check(trajectories: list[Trajectory], version: int) -> list[Trajectory]:
        stale = [t for t in trajectories if _oldest(t, version) < version]
        if not stale:
            return []
        scoring["seconds"] += trainer_seconds(settings, pricing, stale, backward=False)
        lengths = [len(t) for t in stale]
        kept = truncate_to_acceptance(settings, scoring["step"], stale)
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
        trained.add(batch, step - 1)
        train = trainer_seconds(settings, pricing, batch)
        sync = weight_sync_seconds(settings, pricing)
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
    gpus, switch = pricing.layout.gpus, monitor.switch_step
    return result_of(name, context, seed, settings, engine, seconds, gpus, switch, trained, wall)


def _pricing(config: RunConfig, settings: Settings) -> Pricing:
    """What a run's work costs on `settings.gpu`: its model's shape, on its layout."""
    return run_pricing(config, settings.gpu)


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
        block_size=config.vllm.block_size,
    )
    if settings.compiled and not (in_flight or settings.tool_calls or settings.profile):
        return CompiledSimulatedEngine(pricing, **common)
    return SimulatedEngine(
        settings.profile.step_cost() if settings.profile else pricing,
        tool_calls=settings.tool_calls.sampler(seed) if settings.tool_calls else None,
        **common,
    )


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
