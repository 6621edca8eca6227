"""Fields whose defaults suit the embedded tiny model, not a large one. A config for a model of
1B parameters or more that leaves one of them unset is warned, once per field, naming the
value it would train with: otherwise a config that forgets `train.learning_rate` trains an 8B
model at the tiny model's 5e-4 without a word."""

from __future__ import annotations

import warnings

from rollverify.config.model_shape import ModelShape
from rollverify.config.run_config import RunConfig
from rollverify.infra.nested_dicts import config_fields

# field -> what a large model wants instead
TINY_DEFAULTS = {
    "model.dtype": "bfloat16 on GPUs",
    "train.learning_rate": "the paper's 1e-6 for Qwen3-8B",
    "train.gradient_checkpointing": "true for responses of thousands of tokens",
    "rollout.max_new_tokens": "the task's response budget (8192 in the paper)",
    "vllm.max_model_len": "prompt + rollout.max_new_tokens",
    "vllm.enforce_eager": "false on GPUs (CUDA graphs)",
    "vllm.sync_check_tolerance": "~0.1 with bfloat16",
}
LARGE_MODEL = 1e9  # parameters


class TinyDefaultWarning(UserWarning):
    """A large model's config falls back to a default chosen for the tiny model."""


def warn_tiny_defaults(config: RunConfig, given: set[str]) -> list[str]:
    """Warn of each TINY_DEFAULTS field that `given` (the dotted fields a file or the command
    line set) leaves to its default, when model.path is a large model; return the lines."""
    missing = [name for name in TINY_DEFAULTS if name not in given]
    if not missing:
        return []
    try:
        parameters = ModelShape.of(config.model_path(), revision=config.model.revision).parameters
    except (ValueError, OSError, KeyError):  # its config.json is not here: nothing to say
        return []
    if parameters < LARGE_MODEL:
        return []
    values = config_fields(config.to_dict())
    lines = [
        f"{name}: {values[name]!r} is the tiny model's default, for a "
        f"{parameters / 1e9:.1f}B model; set it ({wanted}; "
        "experiments/qwen3-8b-dapo-math.yaml sets them all)"
        for name, wanted in TINY_DEFAULTS.items()
        if name in missing
    ]
    for line in lines:
        warnings.warn(line, TinyDefaultWarning, stacklevel=3)
    return lines
