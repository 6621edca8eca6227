"""Where a run's work runs: which GPUs roll out and which train."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Layout:
    """Where a run's work runs. colocated: the same GPUs roll out, then train (the paper's
    setup; the in-process engine); disaggregated: the engines hold GPUs of their own, idle
    while the trainer works and the other way round (synchronous RL: no overlap). A run's
    (rollverify/training/cost_settings.py): cost.layout, and its engines and processes."""

    kind: Literal["colocated", "disaggregated"]
    trainer_gpus: int
    engines: int = 1
    tensor_parallel: int = 1

    @property
    def gpus(self) -> int:
        engine_gpus = self.engines * self.tensor_parallel
        if self.kind == "colocated":
            return max(self.trainer_gpus, engine_gpus)
        return self.trainer_gpus + engine_gpus

    def describe(self, gpu: str) -> str:
        """'8 h100s: 4 engines x 1 GPU + 4 trainer GPUs' (disaggregated), or '4 h100s, the
        engines and the trainer taking turns on them' (colocated)."""
        if self.kind == "colocated":
            return f"{self.gpus} {gpu}s, the engines and the trainer taking turns on them"
        engines = f"{self.engines} engine{'s' * (self.engines > 1)} x {self.tensor_parallel} GPU"
        return f"{self.gpus} {gpu}s: {engines} + {self.trainer_gpus} trainer GPUs"
