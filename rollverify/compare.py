"""Comparisons: every (method, seed) pair as a child of one MLflow parent run.

Runs go one after another in this process and share one rollout engine (the vLLM sidecar
starts once, ~45 s here; each run resets it to the base weights and its own seed); runs of
several trainer processes (train.processes) start their own, in their rank 0. The
parent's folder holds `parent.json` (run id, tracking URI), which `rvctl report` reads.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rollverify.atomic import atomic_write_text
from rollverify.config import RunConfig
from rollverify.methods import METHODS

if TYPE_CHECKING:  # heavy (torch, TRL, MLflow): imported when runs start, not for `plan`
    from rollverify.training.run import RunSummary


@dataclass(frozen=True)
class Child:
    method: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.method}/s{self.seed}"


@dataclass
class Comparison:
    folder: Path
    parent_run_id: str
    tracking_uri: str
    summaries: list[RunSummary]


# (child, step, metrics) for each logged step; step -1: the child starts
ProgressFn = Callable[[Child, int, dict[str, float]], None]


def plan(methods: list[str], seeds: int, first_seed: int) -> list[Child]:
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"methods: unknown {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    if seeds < 1:
        raise ValueError(f"--seeds: must be >= 1, got {seeds}")
    return [Child(m, first_seed + i) for m in methods for i in range(seeds)]


def open_parent(config: RunConfig, kind: str, name: str, tags: dict[str, str]) -> tuple:
    """The parent run and its folder (with parent.json); returns (tracker, folder, uri)."""
    from rollverify.tracking import MLflowTracker, default_tracking_uri

    uri = config.tracking.uri or default_tracking_uri(config.output)
    folder = Path(config.output) / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    parent = MLflowTracker(
        uri,
        config.tracking.experiment,
        run_name=folder.name,
        params=config.to_dict(),
        tags={"kind": kind, **tags},
        artifact_root=Path(config.output).resolve() / "mlartifacts",
    )
    record = {"kind": kind, "run_id": parent.run_id, "tracking_uri": uri, **tags}
    atomic_write_text(folder / "parent.json", json.dumps(record, indent=2) + "\n")
    return parent, folder, uri


def compare(
    config: RunConfig,
    methods: list[str],
    seeds: int = 1,
    on_progress: ProgressFn = lambda child, step, metrics: None,
) -> Comparison:
    from rollverify.training.parts import engine_running, make_engine
    from rollverify.training.run import train

    config.check_data()  # before the parent run and the engine: every child needs the data
    children = plan(methods, seeds, config.train.seed)
    parent, folder, uri = open_parent(
        config, "compare", "compare", {"methods": ",".join(methods), "seeds": str(seeds)}
    )
    runs_config = config.with_overrides({"output": str(folder)})
    summaries: list[RunSummary] = []
    status = "FAILED"
    try:
        # Several trainer processes: each run's rank 0 starts its own engine (a worker
        # process cannot use this one's).
        shared = runs_config.train.processes == 1
        engines = engine_running(make_engine(runs_config), runs_config) if shared else nullcontext()
        with engines as engine:
            for child in children:
                on_progress(child, -1, {})
                child_config = runs_config.with_overrides(
                    {"train.method": child.method, "train.seed": child.seed, "tracking.uri": uri}
                )
                summaries.append(
                    train(
                        child_config,
                        on_step=lambda step, metrics, c=child: on_progress(c, step, metrics),
                        parent_run_id=parent.run_id,
                        engine=engine,
                    )
                )
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        parent.finish(status)
    return Comparison(folder, parent.run_id, uri, summaries)
