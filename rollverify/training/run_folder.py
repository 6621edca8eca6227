"""A run's folder as `rvctl resume` finds it, and the config it resumes with: light (no torch,
no TRL), so a wrong folder or config is told before anything heavy loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rollverify.config import RunConfig, load_config, with_overrides


def find_run(folder: Path) -> Path:
    """A run folder (it has config.yaml), or the one run of an output folder."""
    if (folder / "config.yaml").is_file():
        return folder
    runs = sorted(p.parent for p in folder.glob("*/config.yaml")) if folder.is_dir() else []
    if len(runs) == 1:
        return runs[0]
    if runs:
        listed = ", ".join(p.name for p in runs)
        raise ValueError(f"RUN_DIR {folder}: holds {len(runs)} runs ({listed}); name one of them")
    raise ValueError(f"RUN_DIR {folder}: not a run folder (no config.yaml); check the path")


def is_finished(step: int | None, config: RunConfig, overrides: dict[str, Any] | None) -> bool:
    """A run at `step` (its newest checkpoint) trained all its steps, and no `--steps` asks for
    more: `rvctl resume` says so and exits 0."""
    asked = (overrides or {}).get("train.steps") is not None
    return step is not None and config.train.steps <= step and not asked


def resumed_config(
    run_dir: Path, overrides: dict[str, Any] | None = None, config_path: str | Path | None = None
) -> RunConfig:
    """The run's own config (or `config_path`'s) with `overrides`: what a resume trains with
    (whether it may: training/run.py's resume_plan, against the checkpoint)."""
    base = load_config(config_path if config_path is not None else run_dir / "config.yaml")
    return with_overrides(base, overrides or {})
