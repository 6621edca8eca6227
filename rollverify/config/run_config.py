"""A run's whole config: its sections, and what the run derives from them (the engine, the
devices it holds, the GPUs its cost is modeled on, the model's folder)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rollverify.config.field import config_field
from rollverify.config.sections import (
    CorrectionConfig,
    CostConfig,
    ModelConfig,
    RolloutConfig,
    TaskConfig,
    TrackingConfig,
    TrainConfig,
    VerifyConfig,
    VLLMConfig,
)
from rollverify.paths import locate


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    output: str = config_field("runs", "Folder for run outputs (one subfolder per run).")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def engine(self) -> str:
        """rollout.engine with "auto" resolved: vllm where vLLM is installed, else hf."""
        if self.rollout.engine != "auto":
            return self.rollout.engine
        import importlib.util

        return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"

    def with_overrides(self, overrides: dict[str, Any]) -> RunConfig:
        """A checked copy with dotted fields replaced ({"train.seed": 1}; None: keep)."""
        from rollverify.config.load import load_config  # (load.py imports this module)
        from rollverify.dicts import config_fields

        wanted = {k: v for k, v in overrides.items() if v is not None}
        return load_config(overrides=config_fields(self.to_dict()) | wanted)

    def master_dtype(self) -> str:
        """The dtype the trainer holds its weights and AdamW state in (train.precision)."""
        return "float32" if self.train.precision == "mixed" else self.model.dtype

    def sampling(self):
        """How the engines sample (rollout.temperature, top_p, top_k)."""
        from rollverify.sampling import Sampling

        rollout = self.rollout
        return Sampling(rollout.temperature, rollout.top_p, rollout.top_k)

    def max_prompt_tokens(self) -> int:
        """task.max_prompt_tokens, or what the engine's context leaves beside a response."""
        if self.task.max_prompt_tokens is not None:
            return self.task.max_prompt_tokens
        return self.vllm.max_model_len - self.rollout.max_new_tokens

    def check_data(self) -> None:
        """ConfigError naming every data file the task needs that is not there (a config
        loads without its data: see config/resolve_paths.py)."""
        from rollverify.config.load import ConfigError
        from rollverify.config.resolve_paths import missing_data

        problems = missing_data(self)
        if problems:
            raise ConfigError(problems)

    def device_layout(self):
        """Devices the run holds, for the cost ledger (rollverify/ledger.py)."""
        from rollverify.ledger import DeviceLayout

        engines = self.vllm.engines * self.vllm.tensor_parallel_size
        return DeviceLayout(self.train.processes, engines if self.engine() == "vllm" else 0)

    def cost_layout(self):
        """The GPUs the cost model prices this run on (rollverify/costmodel/layout.py)."""
        from rollverify.costmodel import Layout

        kind = self.cost.layout
        if kind == "auto":
            kind = "disaggregated" if self.engine() == "vllm" else "colocated"
        if self.engine() == "vllm":
            return Layout(
                kind, self.train.processes, self.vllm.engines, self.vllm.tensor_parallel_size
            )
        return Layout(kind, self.train.processes)  # the in-process engine: one, on one GPU

    def model_path(self) -> str:
        """The local model folder (a relative one: in the working directory, else the
        package's data), or a hub id as given."""
        found = locate(self.model.path)
        return str(found) if found is not None else self.model.path
