"""What one training run is (RunPlan: its config, folder and starting point) and what it
returns (RunSummary, also its folder's summary.json): shared by the run (run.py), the launcher
of its processes (launch.py) and the comparisons that start runs (rollverify/experiments/)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rollverify.config import RunConfig
    from rollverify.rollout.engines.protocol import RolloutEngine
    from rollverify.training.checkpoint.files import Checkpoint


@dataclass
class RunSummary:
    run_dir: str
    run_id: str
    tracking_uri: str
    method: str
    seed: int
    steps: int
    eval_accuracy_before: float
    eval_accuracy_after: float
    reward_mean_first: float
    reward_mean_last: float
    ops_mean_last: float
    acceptance_window_mean: float | None
    switch_step: int | None
    wall_seconds: float
    device_seconds: float


@dataclass
class RunPlan:
    """What one training run is: its config and folder, and where it starts from.

    checkpoint: continue from it (None: from step 0, also for a run killed before its first
    checkpoint); engine: an already started engine to reuse (reset to this run's weights and
    seed), else the configured one is started and stopped here."""

    config: RunConfig
    run_dir: Path
    checkpoint: Checkpoint | None = None
    parent_run_id: str | None = None
    on_step: Callable[[int, dict[str, float]], None] = lambda step, metrics: None
    engine: RolloutEngine | None = None

    @property
    def step(self) -> int:
        return 0 if self.checkpoint is None else self.checkpoint.step
