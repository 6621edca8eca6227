"""One typed config for a run. Every field documents the rule it follows; `load_config` checks
them all and reports every problem at once, each naming the field and the fix.

    rvctl train --config experiments/default.yaml --method rollverify

Files are short diffs of these defaults (the embedded default: a tiny Qwen3 on the chain task,
CPU, in-process engine). Relative paths in a file resolve against its folder, then the working
directory, then the package's shipped data (rollverify/infra/paths.py); a shipped one keeps its
name. The parts:

    sections/         the sections (model, task, rollout, verify, train, correction, vllm,
                      tracking, cost), a module per part of the run, each field with its
                      default, its meaning and its rule (field.py)
    run_config.py     RunConfig: the sections together, and what a run derives from them
    load.py           load_config: defaults <- YAML file <- overrides; with_overrides: a
                      checked copy; parse_settings: `--set key=value` items as overrides
    errors.py         ConfigError: every problem, one line each
    coercion.py       each value checked against its type and rule; unknown keys named
    resolve_paths.py  the config's paths found, or reported
    check_links.py    values linked to each other, checked together
"""

from rollverify.config.errors import ConfigError
from rollverify.config.load import load_config, parse_settings, with_overrides
from rollverify.config.run_config import RunConfig
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

__all__ = [
    "ConfigError",
    "CorrectionConfig",
    "CostConfig",
    "ModelConfig",
    "RolloutConfig",
    "RunConfig",
    "TaskConfig",
    "TrackingConfig",
    "TrainConfig",
    "VLLMConfig",
    "VerifyConfig",
    "load_config",
    "parse_settings",
    "with_overrides",
]
