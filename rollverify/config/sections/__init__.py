"""The sections of a run's config, one dataclass each: every field with its default, what it
means and the rule its value follows. Grouped by the part of a run they set:

    model_task.py   model, task
    rollout.py      rollout
    verify.py       verify, correction
    train.py        train
    services.py     vllm, tracking, cost
"""

from rollverify.config.sections.model_task import ModelConfig, TaskConfig
from rollverify.config.sections.rollout import RolloutConfig
from rollverify.config.sections.services import CostConfig, TrackingConfig, VLLMConfig
from rollverify.config.sections.train import TrainConfig
from rollverify.config.sections.verify import CorrectionConfig, VerifyConfig

__all__ = [
    "CorrectionConfig",
    "CostConfig",
    "ModelConfig",
    "RolloutConfig",
    "TaskConfig",
    "TrackingConfig",
    "TrainConfig",
    "VLLMConfig",
    "VerifyConfig",
]
