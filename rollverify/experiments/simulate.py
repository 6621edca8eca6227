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
  run's own trace (`--lengths-from RUN`).
- **Acceptance**: each verification cycle keeps the fraction `acceptance` of every cached
  trajectory, so the rate the monitor sees (kept / cached tokens, the spec's) is exactly that.
  The default is 0.95: the embedded default ends `make demo` at 0.94 (ds = 0.01). It can also
  follow a run's measured curve step by step (`--acceptance-from RUN`), so that the switch
  happens where it did. Truncation compounds: a trajectory resumed n times keeps
  acceptance^n of its older tokens, so a low acceptance at long contexts makes the longest
  trajectories regenerate much of themselves (see docs/cost-model.md).
- **Prompts**: `prompt_tokens` each (default 256).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
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
from rollverify.cost.costmodel.profile import Profile
from rollverify.cost.trace import scoring_work
from rollverify.rollout.engines.simulated import SimulatedEngine, Sketch
from rollverify.rollout.schedules import PromptGroup, RolloutState, collect
from rollverify.rollout.trajectory import Trajectory


@dataclass(frozen=True)
class LengthModel:
    """Response lengths: lognormal(median, sigma), or drawn from `samples` (a run's own)."""

    median: float = 1500.0
    sigma: float = 0.9
    samples: tuple[int, ...] = ()

    def sampler(self, group_size: int, budget: int, seed: int) -> Callable[[int, int], int]:
        """lengths(group_id, sample_index): drawn once per trajectory, in blocks of groups."""
        rng, table = np.random.default_rng(seed), np.zeros((0, group_size), dtype=np.int64)

        def lengths(group_id: int, sample_index: int) -> int:
            nonlocal table
            while group_id >= len(table):
                if self.samples:
                    block = rng.choice(np.array(self.samples), size=(4096, group_size))
                else:
                    block = rng.lognormal(math.log(self.median), self.sigma, (4096, group_size))
                table = np.concatenate([table, np.ceil(block).astype(np.int64)])
            return int(min(max(table[group_id, sample_index], 1), budget))

        return lengths

    def describe(self) -> str:
        if self.samples:
            return f"a run's {len(self.samples)} response lengths"
        return f"lognormal(median {self.median:g}, sigma {self.sigma:g})"


@dataclass(frozen=True)
class Settings:
    methods: tuple[str, ...] = ("grpo", "partial", "rollverify")
    contexts: tuple[int, ...] = (8192,)
    gpu: str = "h100"
    steps: int = 100
    seeds: int = 1
    prompt_tokens: int = 256
    lengths: LengthModel = field(default_factory=LengthModel)
    acceptance: tuple[float, ...] = (0.95,)  # one value, or one per step (the last repeats)
    finishes_per_poll: int | None = None  # None: slots / 64 (exact at 1, slower)
    profile: Profile | None = None  # a machine's fitted terms (rvctl calibrate) price the run

    def check(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"--methods: unknown {', '.join(unknown)}; see rvctl methods")
        if self.gpu not in GPUS:
            raise ValueError(f"--gpu: {self.gpu!r} is not one of {', '.join(GPUS)}")
        if not self.contexts or min(self.contexts) < 1:
            raise ValueError("--context: give response budgets of at least 1 token")
        if self.steps < 1:
            raise ValueError(f"--steps: must be >= 1, got {self.steps}")
        if self.seeds < 1:
            raise ValueError(f"--seeds: must be >= 1, got {self.seeds}")
        if self.prompt_tokens < 1:
            raise ValueError(f"--prompt-tokens: must be >= 1, got {self.prompt_tokens}")
        if not self.acceptance or not all(0 <= a <= 1 for a in self.acceptance):
            raise ValueError("--acceptance: must be in [0, 1]")


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

    @property
    def gpu_days(self) -> float:
        return sum(self.seconds.values()) * self.gpus / 86_400

    @property
    def rollout_share(self) -> float:
        total = sum(self.seconds.values())
        return self.seconds["rollout"] / total if total else math.nan


@dataclass(frozen=True)
class _SketchGroup(PromptGroup):
    def samples(self, group_size: int) -> list[Trajectory]:
        return [Sketch(self.prompt_ids, self.group_id, i) for i in range(group_size)]


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
    method, rollout = METHODS[method_name], config.rollout
    pricing = Pricing(ModelShape.of(config.model_path()), GPUS[settings.gpu], Layout.of(config))
    engine = SimulatedEngine(
        settings.profile.step_cost() if settings.profile else pricing,
        slots=rollout.slots,
        max_new_tokens=context,
        lengths=settings.lengths.sampler(rollout.group_size, context, seed),
        admit_batch=1,  # vLLM admits into every free slot at once
        finishes_per_poll=settings.finishes_per_poll or max(1, rollout.slots // 64),
    )
    source, state = _Prompts(settings.prompt_tokens), RolloutState()
    monitor = AcceptanceMonitor(config.verify.window, config.verify.switch_threshold)
    seconds = dict.fromkeys(("rollout", "train", "verify", "sync"), 0.0)
    shape, gpu, efficiency, layout = pricing.shape, pricing.gpu, pricing.efficiency, pricing.layout
    for step in range(1, settings.steps + 1):
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
        tokens, attended = _work(list(result.trajectories()))
        if settings.profile:
            seconds["train"] += settings.profile.train_seconds(tokens, attended)
        else:
            seconds["train"] += train_seconds(
                shape, gpu, efficiency, tokens, attended, layout.trainer_gpus
            )
        if method.verify:
            seconds["verify"] += _verify(config, settings, method, state, monitor, step, pricing)
        seconds["sync"] += (
            settings.profile.sync_seconds(shape.weight_bytes)
            if settings.profile
            else sync_seconds(shape.weight_bytes, gpu, efficiency, layout)
        )
        engine.load_weights([], version=step)
    return Result(
        method=method_name,
        context=context,
        gpu=settings.profile.machine if settings.profile else settings.gpu,
        seed=seed,
        seconds=seconds,
        gpus=layout.gpus,
        slot_utilization=engine.stats.utilization(engine.slots),
        tokens_generated=engine.stats.tokens_generated,
        tokens_regenerated=engine.stats.tokens_regenerated,
        switch_step=monitor.switch_step,
        prefill_seconds=engine.prefill_seconds,
    )


def _verify(config, settings, method, state, monitor, step, pricing) -> float:
    """One verification cycle on the cache: keep `acceptance` of every cached trajectory, feed
    the monitor; returns the seconds of scoring the cache forward-only."""
    cached = [t for t in state.cache if not t.finished and len(t) > 0]
    if not cached:
        return 0.0
    acceptance = settings.acceptance[min(step, len(settings.acceptance)) - 1]
    before = sum(len(t) for t in cached)
    tokens, attended = _work(cached)
    kept = [math.floor(acceptance * len(t)) for t in cached]
    for trajectory, k in zip(cached, kept, strict=True):
        trajectory.truncate(k)
    if method.switching:
        monitor.update(sum(kept), before, step=step)
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


def _work(trajectories: list) -> tuple[int, int]:
    return scoring_work([len(t.prompt_ids) for t in trajectories], [len(t) for t in trajectories])


def simulate(
    config: RunConfig, settings: Settings, on_result: Callable[[Result], None] = lambda r: None
) -> list[Result]:
    settings.check()
    results = []
    for context in settings.contexts:
        for seed in range(settings.seeds):
            for method in settings.methods:
                results.append(simulate_one(config, settings, method, context, seed))
                on_result(results[-1])
    return results


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
            }
        )
    for row in table:
        grpo = next(
            (r for r in table if r["method"] == "grpo" and r["context"] == row["context"]), None
        )
        if grpo is not None and row["gpu_days"]:
            row["speedup_vs_grpo"] = grpo["gpu_days"] / row["gpu_days"]
    return table


def lengths_of_run(run_dir: str | Path) -> LengthModel:
    """The response lengths a run trained on (its trainer trace), as a length model."""
    from rollverify.cost import trace

    if not (Path(run_dir) / "trace").is_dir():
        raise ValueError(
            f"--lengths-from {run_dir}: no trace folder here; pass a run folder that "
            "checkpointed (its trace is written with each checkpoint)"
        )
    table = trace.read(Path(run_dir) / "trace", "trainer")
    samples = tuple(n for lengths in table.column("completions").to_pylist() for n in lengths)
    if not samples:
        raise ValueError(f"--lengths-from {run_dir}: its trace records no completion lengths")
    return LengthModel(samples=samples)


def acceptance_of_run(run_dir: str | Path) -> tuple[float, ...]:
    """A run's measured acceptance rate per step (steps without a cycle repeat the last)."""
    import json

    from mlflow.tracking import MlflowClient

    try:
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        raise ValueError(
            f"--acceptance-from {run_dir}: not a finished run folder (no summary.json)"
        ) from None
    history = MlflowClient(summary["tracking_uri"]).get_metric_history(
        summary["run_id"], "acceptance_rate"
    )
    by_step = {m.step: m.value for m in history if not math.isnan(m.value)}
    if not by_step:
        raise ValueError(f"--acceptance-from {run_dir}: the run logged no acceptance_rate")
    curve, last = [], next(iter(by_step.values()))
    for step in range(1, max(by_step) + 1):
        last = by_step.get(step, last)
        curve.append(last)
    return tuple(curve)
