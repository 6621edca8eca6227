"""Where a stopped or killed run goes on from (RunPlan): its last good checkpoint, its own
config with the overrides a resume may make, or RunFinished. `rvctl resume` and
training/run.py's `resume` call `resume_plan` once and run the plan; so does rank 0 of a
launched run (worker.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from rollverify.config import ConfigError
from rollverify.training.checkpoint.files import latest
from rollverify.training.checkpoint.run_state import config_changes
from rollverify.training.run_folder import find_run, is_finished, resumed_config
from rollverify.training.run_plan import RunPlan

if TYPE_CHECKING:
    from rollverify.rollout.engines.protocol import RolloutEngine


class RunFinished(Exception):
    """`rvctl resume` of a run that reached its last step: nothing to do (exit 0). run_dir:
    the run's folder (its end may still need completing: run_end.finished_run)."""

    exit_code = 0

    def __init__(self, run_dir: Path, message: str) -> None:
        super().__init__(message)
        self.run_dir = run_dir


def resume_plan(
    run_dir: str | Path,
    overrides: dict[str, Any] | None = None,
    config_path: str | Path | None = None,
    on_step: Callable[[int, dict[str, float]], None] = lambda step, metrics: None,
    engine: RolloutEngine | None = None,
    parent_run_id: str | None = None,
) -> RunPlan:
    """Continue a run from its last good checkpoint (or from step 0 if it has none yet), in
    the same folder and MLflow run. `run_dir` may also be an output folder holding one run.

    The config is the run's own (or `config_path`), with `overrides`; a change that would make
    the rest of the run a different experiment is refused (ConfigError, one line per field).
    A run already at its last step raises RunFinished (say --steps N to train further).
    """
    run_dir = find_run(Path(run_dir))
    checkpoint = latest(run_dir / "checkpoints")
    config = resumed_config(run_dir, overrides, config_path)
    if checkpoint is not None:
        if is_finished(checkpoint.step, config, overrides):
            raise RunFinished(
                run_dir,
                f"{run_dir} is finished: it trained all {checkpoint.step} steps; to train "
                f"further, rvctl resume {run_dir} --steps N with N > {checkpoint.step}",
            )
        problems = config_changes(checkpoint.state["config"], config.to_dict())
        if config.train.steps <= checkpoint.step:
            problems.append(
                f"train.steps: the run is at step {checkpoint.step} of {config.train.steps}; "
                f"pass --steps N with N > {checkpoint.step} to train further"
            )
        if problems:
            raise ConfigError(problems)
    else:  # nothing trained yet, but its MLflow run (params, method tag) may exist
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
        problems = config_changes(saved, config.to_dict())
        if problems:
            raise ConfigError(problems)
    return RunPlan(config, run_dir, checkpoint, parent_run_id, on_step, engine)
