"""Where a run's work runs: which GPUs roll out and which train."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rollverify.config import RunConfig


@dataclass(frozen=True)
class Layout:
    """Where a run's work runs. colocated: the same GPUs roll out, then train (the paper's
    setup; the in-process engine); disaggregated: the engines hold GPUs of their own, idle
    while the trainer works and the other way round (synchronous RL: no overlap)."""

    kind: Literal["colocated", "disaggregated"]
    trainer_gpus: int
    engines: int = 1
    tensor_parallel: int = 1

    @classmethod
    def of(cls, config: RunConfig) -> Layout:
        """The GPUs the cost model prices a run of `config` on: cost.layout, where "auto" is
        disaggregated for the vllm engine and colocated for the in-process one."""
        kind = config.cost.layout
        if kind == "auto":
            kind = "disaggregated" if config.engine() == "vllm" else "colocated"
        if config.engine() == "vllm":
            vllm = config.vllm
            return cls(kind, config.train.processes, vllm.engines, vllm.tensor_parallel_size)
        return cls(kind, config.train.processes)  # the in-process engine: one, on one GPU

    @property
    def gpus(self) -> int:
        engine_gpus = self.engines * self.tensor_parallel
        if self.kind == "colocated":
            return max(self.trainer_gpus, engine_gpus)
        return self.trainer_gpus + engine_gpus
