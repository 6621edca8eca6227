"""The cost of a run's steps: its engines' iterations and its trainer's work, priced by the
roofline (roofline.py) for one model on one GPU in one layout."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from rollverify.config.model_shape import ModelShape
from rollverify.cost.costmodel.gpus import Efficiency, GPUProfile
from rollverify.cost.costmodel.layout import Layout
from rollverify.cost.costmodel.roofline import (
    decode_run_seconds,
    engine_step_seconds,
    prefill_seconds,
    sync_seconds,
    train_seconds,
)
from rollverify.cost.trace import EngineStep, TrainerStep


def engines_seconds(
    shape: ModelShape,
    gpu: GPUProfile,
    efficiency: Efficiency,
    steps: Iterable[EngineStep],
    tensor_parallel: int = 1,
) -> float:
    """Wall seconds of the engines' iterations: each engine runs its own in sequence, the
    engines run side by side (the slowest sets the time)."""
    per_engine: dict[int, float] = defaultdict(float)
    for step in steps:
        per_engine[step.engine] += engine_step_seconds(
            shape, gpu, efficiency, step, tensor_parallel
        )
    return max(per_engine.values(), default=0.0)


def step_seconds(
    shape: ModelShape,
    gpu: GPUProfile,
    efficiency: Efficiency,
    layout: Layout,
    rollout: Iterable[EngineStep],
    evaluation: Iterable[EngineStep],
    trainer: TrainerStep,
) -> dict[str, float]:
    """Modeled wall seconds of one training step, by the ledger's phases (cost/ledger.py);
    `measure` is scoring for the logs only, kept apart as the ledger keeps it."""
    tp, gpus = layout.tensor_parallel, layout.trainer_gpus
    return {
        "rollout": engines_seconds(shape, gpu, efficiency, rollout, tp),
        "eval": engines_seconds(shape, gpu, efficiency, evaluation, tp),
        "train": train_seconds(
            shape, gpu, efficiency, trainer.tokens_trained, trainer.attended_trained, gpus
        ),
        "verify": prefill_seconds(
            shape, gpu, efficiency, trainer.tokens_scored, trainer.attended_scored, gpus
        ),
        "sync": sync_seconds(trainer.sync_bytes, gpu, efficiency, layout),
        "measure": prefill_seconds(
            shape, gpu, efficiency, trainer.tokens_measured, trainer.attended_measured, gpus
        ),
    }


@dataclass(frozen=True)
class Pricing:
    """A run's model on a GPU in a layout: the prices of its steps."""

    shape: ModelShape
    gpu: GPUProfile
    layout: Layout
    efficiency: Efficiency = Efficiency()

    def engines(self, steps: Iterable[EngineStep]) -> float:
        return engines_seconds(
            self.shape, self.gpu, self.efficiency, steps, self.layout.tensor_parallel
        )

    def step(self, rollout: Iterable[EngineStep], trainer: TrainerStep) -> dict[str, float]:
        return step_seconds(
            self.shape, self.gpu, self.efficiency, self.layout, rollout, [], trainer
        )

    # StepCost, for a simulated engine: the layout's engines decode side by side, each with an
    # even share of the rows.
    reads_padding = False  # paged attention: each row reads its own context

    def decode_run(self, rows: float, context: float, padded: float, steps: int) -> float:
        engines, tp = self.layout.engines, self.layout.tensor_parallel
        return decode_run_seconds(
            self.shape, self.gpu, self.efficiency, rows / engines, context / engines, steps, tp
        )

    def iteration(self, step: EngineStep) -> float:
        engines = self.layout.engines  # (an admission's prefills spread over the engines too)
        share = EngineStep(
            step.decode_rows / engines,
            step.decode_context / engines,
            step.prefill_rows / engines,
            step.prefill_tokens / engines,
            step.prefill_attended / engines,
        )
        return engine_step_seconds(
            self.shape, self.gpu, self.efficiency, share, self.layout.tensor_parallel
        )
