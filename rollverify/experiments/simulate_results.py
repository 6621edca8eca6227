"""`rvctl simulate`'s results: one simulated run (Result), what its trainer trained (Trained),
and the cost table over runs (rows: means over seeds, the speedup against grpo)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from rollverify.experiments.simulate_settings import Settings
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


@dataclass
class Trained:
    """What the trainer trained over a run: trajectories, those cut at the response budget,
    and the most versions a trained token lagged the policy training it."""

    trajectories: int = 0
    truncated: int = 0
    staleness: int = 0

    def add(self, batch: list[Trajectory], version: int) -> None:
        """A batch trained by `version`."""
        self.trajectories += len(batch)
        self.truncated += sum(t.finish_reason == "length" for t in batch)
        self.staleness = max(self.staleness, lag(batch, version))


def lag(batch: list[Trajectory], version: int) -> int:
    """The most versions a trajectory of `batch` lags `version` (by its oldest token)."""
    oldest = [t.oldest_version for t in batch if getattr(t, "oldest_version", None) is not None]
    return version - min(oldest) if oldest else 0


def result_of(
    method: str,
    context: int,
    seed: int,
    settings: Settings,
    engine,
    seconds: dict[str, float],
    gpus: int,
    switch_step: int | None,
    trained: Trained,
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
        trained=trained.trajectories,
        truncated=trained.truncated,
        preemptions=stats.preemptions,
        tokens_recomputed=stats.tokens_recomputed,
        staleness_max=trained.staleness,
        wall_seconds=wall,
        tool_calls=engine.calls_made,
    )


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
                "modeled_gpu_days": statistics.fmean(r.gpu_days for r in group),
                "modeled_speedup_vs_grpo": None,
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
        if grpo is not None and row["modeled_gpu_days"]:
            row["modeled_speedup_vs_grpo"] = grpo["modeled_gpu_days"] / row["modeled_gpu_days"]
    return table


def setting(config, settings: Settings) -> str:
    """The title of the cost table: what was simulated, where, and how (one line each of
    steps and batch, GPUs and layout, the KV limit and the lengths)."""
    from rollverify.training.cost_settings import run_pricing

    rollout = config.rollout
    layout = run_pricing(config, settings.gpu).layout.describe(settings.gpu)
    kv = "KV-cache limit on (preemption)" if settings.kv_cache else "KV-cache limit off"
    lengths = settings.lengths.describe()
    if settings.tool_calls is not None:
        lengths += f"; tool calls: {settings.tool_calls.describe()}"
    return (
        f"{config.model.path}, {settings.steps:,} steps of {rollout.batch_groups} x "
        f"{rollout.group_size}, on {layout}; {kv}; lengths {lengths}"
    )


def verdicts(table: list[dict[str, Any]]) -> list[str]:
    """One line per row but grpo's: its modeled cost against grpo's at its context, and
    what its schedule did (switched, regenerated)."""
    lines = []
    for row in table:
        if row["method"] == "grpo":
            continue
        speedup = row["modeled_speedup_vs_grpo"]
        where = f"{row['method']} at {row['context']:,}"
        if speedup is None:
            lines.append(
                f"{where}: {row['modeled_gpu_days']:.3g} GPU-days (no grpo row to compare)"
            )
            continue
        ratio = 1 / speedup
        change = f"{1 - ratio:.1%} saved" if ratio <= 1 else f"{ratio - 1:.1%} more"
        said = [f"{ratio:.2f}x grpo's GPU-days ({change})"]
        if row["switch_step"] is not None:
            said.append(f"switched to on-policy at step {row['switch_step']:g}")
        if row["tokens_regenerated"]:
            share = row["tokens_regenerated"] / max(1, row["tokens_generated"])
            said.append(f"regenerated {share:.1%} of the tokens it generated")
        lines.append(f"{where}: " + "; ".join(said))
    return lines
