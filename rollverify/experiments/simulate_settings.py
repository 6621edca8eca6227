"""What `rvctl simulate` is asked to run, checked before anything starts: the response-length
model, the settings, whether one sequence of each context fits an engine, and what can be read
back from a finished run (its lengths, medians and acceptance curve). Nothing here imports
torch, so the command refuses bad input before it starts its worker processes
(experiments/workers.py); experiments/simulate.py runs what these settings ask for."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rollverify.config import RunConfig
from rollverify.core.methods import METHODS
from rollverify.cost import kv_cache
from rollverify.cost.costmodel import GPUS, ModelShape
from rollverify.cost.costmodel.profile import Profile
from rollverify.cost.tool_latency import ToolCallModel
from rollverify.training.cost_settings import model_shape, pricing_layout

GROWTHS = ("linear", "log")  # how the median moves from `median` to `end_median`


@dataclass(frozen=True)
class LengthModel:
    """Response lengths: lognormal(median, sigma), or drawn from `samples` (a run's own).

    The median can move over the run (training lengthens chains of thought): from `median` at
    step 1 to `end_median` at the last step, linearly or log-linearly (geometrically:
    median x (end / median) ** fraction of the run), or step by step from `medians` (a run's
    trace; the last repeats). A trajectory's length is drawn at the step its group is first
    admitted, and kept when it is paused and resumed. Every length is cut at the response
    budget: a cut response is a truncated one (finish reason "length").
    """

    median: float = 1500.0
    sigma: float = 0.9
    samples: tuple[int, ...] = ()
    end_median: float | None = None  # the median at the last step; None: `median` throughout
    growth: str = "linear"  # "linear" or "log": how the median moves to `end_median`
    medians: tuple[float, ...] = ()  # one median per step (the last repeats); overrides the two

    @property
    def moves(self) -> bool:
        return bool(self.medians) or (
            self.end_median is not None and self.end_median != self.median
        )

    def median_at(self, step: int, steps: int) -> float:
        """The median of responses drawn at training step `step` (1-based) of `steps`."""
        if self.medians:
            return self.medians[min(step, len(self.medians)) - 1]
        if self.end_median is None:
            return self.median
        fraction = (min(step, steps) - 1) / (steps - 1) if steps > 1 else 1.0
        if self.growth == "log":
            return self.median * (self.end_median / self.median) ** fraction
        return self.median + (self.end_median - self.median) * fraction

    def check(self) -> None:
        if self.growth not in GROWTHS:
            raise ValueError(f"--growth: {self.growth!r} is not one of {', '.join(GROWTHS)}")
        if self.end_median is not None and self.end_median <= 0:
            raise ValueError(f"--end-median: must be > 0, got {self.end_median:g}")
        if self.medians and min(self.medians) <= 0:
            raise ValueError("--medians-from: every step's median must be > 0")
        if self.samples and self.moves:
            raise ValueError(
                "--lengths-from: a run's sampled lengths do not move; drop --end-median and "
                "--medians-from, or use --lengths lognormal:MEDIAN,SIGMA"
            )

    def sampler(self, group_size: int, budget: int, seed: int, steps: int = 1) -> LengthSampler:
        """lengths(group_id, sample_index): drawn once per trajectory, in blocks of groups; set
        the sampler's `step` as training proceeds when the median moves."""
        return LengthSampler(self, group_size, budget, seed, steps)

    def describe(self) -> str:
        if self.samples:
            return f"a run's {len(self.samples)} response lengths"
        if self.medians:
            return (
                f"lognormal(median per step from a run, {self.medians[0]:g} to "
                f"{self.medians[-1]:g}, sigma {self.sigma:g})"
            )
        if self.moves:
            return (
                f"lognormal(median {self.median:g} to {self.end_median:g} {self.growth}, "
                f"sigma {self.sigma:g})"
            )
        return f"lognormal(median {self.median:g}, sigma {self.sigma:g})"


class LengthSampler:
    """A LengthModel's draws for one run: `self(group_id, sample_index)` -> tokens, cut at the
    budget. `step` is the training step now (the simulation sets it)."""

    def __init__(self, model: LengthModel, group_size: int, budget: int, seed: int, steps: int):
        self.model, self.budget, self.steps, self.step = model, budget, steps, 1
        self.group_size = group_size
        self.rng = np.random.default_rng(seed)
        self.table = np.zeros((0, group_size), dtype=np.int64 if not model.moves else np.float64)
        self.group_median: dict[int, float] = {}  # the median each group was drawn at
        self.moves = model.moves  # (asked at every admission)

    def __call__(self, group_id: int, sample_index: int) -> int:
        if not self.moves and group_id < len(self.table):  # the usual case, at every admission
            return int(self.table[group_id, sample_index])
        self._draw_through(group_id)
        if not self.moves:
            return int(self.table[group_id, sample_index])
        self.keep([group_id])
        return self._moved(self.group_median[group_id], group_id, sample_index)

    def peek(self, group_ids: np.ndarray, sample_indices: np.ndarray) -> np.ndarray | list[int]:
        """What `self` returns for each, fixing no group's median (engines/simulated_compiled.py
        asks at submission, then `keep`s the groups it admitted)."""
        if not self.moves:
            try:  # (group ids are never negative: an index past the table is one not drawn yet)
                return self.table[group_ids, sample_indices]
            except IndexError:
                self._draw_through(int(group_ids.max()))
                return self.table[group_ids, sample_indices]
        self._draw_through(int(group_ids.max(initial=0)))
        now = self.model.median_at(self.step, self.steps)
        pairs = zip(group_ids.tolist(), sample_indices.tolist(), strict=True)
        return [self._moved(self.group_median.get(g, now), g, i) for g, i in pairs]

    def _moved(self, median: float, group_id: int, sample_index: int) -> int:
        """A moving median's draw: the group's standard normal at `median`, cut."""
        drawn = math.ceil(median * math.exp(self.model.sigma * self.table[group_id, sample_index]))
        return int(min(max(drawn, 1), self.budget))

    def keep(self, group_ids: list[int]) -> None:
        """A moving median is fixed for a group at its first admission: now's, for these."""
        if self.moves:
            now = self.model.median_at(self.step, self.steps)
            for group_id in group_ids:
                self.group_median.setdefault(group_id, now)

    def _draw_through(self, group_id: int) -> None:
        model = self.model
        while group_id >= len(self.table):
            shape = (4096, self.group_size)
            if model.samples:
                block = np.ceil(self.rng.choice(np.array(model.samples), size=shape))
            elif model.moves:  # the median is applied per group, at the step it is drawn
                block = self.rng.standard_normal(shape)
            else:
                block = np.ceil(self.rng.lognormal(math.log(model.median), model.sigma, shape))
            if not model.moves:  # lengths now, cut at the budget (a moving one's are normals)
                block = np.clip(block, 1, self.budget)
            self.table = np.concatenate([self.table, block.astype(self.table.dtype)])


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
    kv_cache: bool = True  # the engines' KV-cache capacity and preemption (False: unlimited)
    asyncs: tuple[int, ...] = ()  # staleness bounds eta of asynchronous runs to add
    keep_kv: bool = False  # asynchronous: keep the stale KV on a weight update (PipelineRL)
    async_verify: bool = False  # also asynchronous runs that verify before training
    tool_calls: ToolCallModel | None = None  # multi-turn responses (None: no tool calls)
    # the engine compiled (engines/simulated_compiled.py) where it applies: the same table as
    # the Python one's (False: the Python engine always, the reference)
    compiled: bool = True

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
        if any(eta < 0 for eta in self.asyncs):
            raise ValueError("--async: staleness bounds eta must be >= 0 (0 is synchronous)")
        if self.tool_calls is not None:
            self.tool_calls.check()
            if self.asyncs:
                raise ValueError(
                    "--tool-calls: asynchronous runs take no tool calls yet; drop --async"
                )
        self.lengths.check()


def check_fits(config: RunConfig, settings: Settings) -> None:
    """Before anything runs: one sequence of every context fits an engine's KV cache, and
    asynchronous runs have a layout that can overlap."""
    if settings.asyncs and pricing_layout(config).kind != "disaggregated":
        raise ValueError(
            "--async: asynchronous training needs engines and trainer on GPUs of their own; "
            "use the vllm engine with cost.layout: disaggregated (or auto)"
        )
    if settings.kv_cache:
        shape = model_shape(config)
        for context in settings.contexts:
            kv_tokens(config, settings, context, shape)


def kv_tokens(config: RunConfig, settings: Settings, context: int, shape: ModelShape) -> int:
    """The KV tokens of all the run's engines on `settings.gpu` (rollverify/cost/kv_cache.py),
    checked as vLLM checks at start: one sequence of the longest context must fit."""
    vllm, layout = config.vllm, pricing_layout(config)
    per_engine = kv_cache.capacity(
        shape,
        GPUS[settings.gpu].memory,
        vllm.gpu_memory_utilization,
        layout.tensor_parallel,
        max_num_seqs=max(1, config.rollout.slots // layout.engines),
        max_num_batched_tokens=vllm.max_num_batched_tokens,
        block_size=vllm.block_size,
    ).tokens
    longest = settings.prompt_tokens + context
    if per_engine < longest:
        raise ValueError(
            f"--context {context}: one sequence of {longest} tokens needs more KV cache than an "
            f"engine of {layout.tensor_parallel} {settings.gpu} GPU(s) holds ({per_engine} "
            "tokens); raise vllm.tensor_parallel_size or vllm.gpu_memory_utilization, or "
            "pass --no-kv-cache"
        )
    return per_engine * layout.engines


def lengths_of_run(run_dir: str | Path, until: int | None = None) -> LengthModel:
    """The response lengths a run trained on (its trainer trace; to step `until`), as a
    length model."""
    rows = _trainer_rows(run_dir, until, "--lengths-from")
    samples = tuple(n for row in rows for n in row["completions"])
    if not samples:
        raise ValueError(f"--lengths-from {run_dir}: its trace records no completion lengths")
    return LengthModel(samples=samples)


def prompts_of_run(run_dir: str | Path, until: int | None = None) -> int:
    """A run's mean prompt length in tokens (its trainer trace; to step `until`): each row
    trains its prompts and completions."""
    rows = _trainer_rows(run_dir, until, "pilot")
    trained = sum(row["tokens_trained"] for row in rows)
    completions = [n for row in rows for n in row["completions"]]
    if not completions:
        raise ValueError(f"{run_dir}: its trace records no completion lengths")
    return max(1, round((trained - sum(completions)) / len(completions)))


def _trainer_rows(run_dir: str | Path, until: int | None, option: str) -> list[dict]:
    from rollverify.cost import trace

    if not (Path(run_dir) / "trace").is_dir():
        raise ValueError(
            f"{option} {run_dir}: no trace folder here; pass a run folder that "
            "checkpointed (its trace is written with each checkpoint)"
        )
    rows = trace.read(Path(run_dir) / "trace", "trainer").to_pylist()
    return [row for row in rows if until is None or row["step"] <= until]


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


def medians_of_run(run_dir: str | Path) -> tuple[float, ...]:
    """A run's median response length per training step (its trainer trace), for a length
    model whose median follows it; steps the trace lacks repeat the step before."""
    from rollverify.cost import trace

    if not (Path(run_dir) / "trace").is_dir():
        raise ValueError(
            f"--medians-from {run_dir}: no trace folder here; pass a run folder that "
            "checkpointed (its trace is written with each checkpoint)"
        )
    table = trace.read(Path(run_dir) / "trace", "trainer")
    lengths_by_step: dict[int, list[int]] = {}
    for step, lengths in zip(
        table.column("step").to_pylist(), table.column("completions").to_pylist(), strict=True
    ):
        lengths_by_step.setdefault(step, []).extend(lengths)
    by_step = {step: float(np.median(n)) for step, n in lengths_by_step.items() if n}
    if not by_step:
        raise ValueError(f"--medians-from {run_dir}: its trace records no completion lengths")
    curve, last = [], by_step[min(by_step)]
    for step in range(1, max(by_step) + 1):
        last = by_step.get(step, last)
        curve.append(last)
    return tuple(curve)
