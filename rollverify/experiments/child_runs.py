"""What a comparison and a sweep share: their parent MLflow run and its folder (`parent.json`),
one child run trained, kept or resumed (`run_child`), and what a child holds on a Ray cluster
(`trial_resources`). compare.py, compare_on_ray.py and sweep.py build on these; none of them
imports another but compare.py, which hands its pairs to compare_on_ray.py on a cluster."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollverify.config import RunConfig
from rollverify.infra.atomic_write import atomic_write_text
from rollverify.training.run_plan import RunSummary


@dataclass(frozen=True)
class Child:
    method: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.method}/s{self.seed}"


class PairsFailed(RuntimeError):
    """Pairs of a comparison failed; the message has a line per pair (its own error)."""

    exit_code = 1


def open_parent(config: RunConfig, kind: str, name: str, tags: dict[str, str]) -> tuple:
    """The parent run and its folder (with parent.json); returns (tracker, folder, uri)."""
    from rollverify.tracking.tracker import MLflowTracker, default_tracking_uri

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


def latest_parent(output: Path, pattern: str, what: str) -> Path:
    """The newest folder matching `pattern` in `output` that holds parent.json: the
    comparison or sweep `--resume` goes on with."""
    found = sorted(p for p in output.glob(pattern) if (p / "parent.json").is_file())
    if not found:
        raise ValueError(f"--resume: no {pattern} folder in {output}; run the {what} first")
    return found[-1]


def trial_resources(config: RunConfig) -> dict[str, float]:
    """What one trial holds: each of its trainer processes' threads and device (engines ask
    for their own)."""
    import torch

    processes = config.train.processes
    gpus = processes if torch.cuda.is_available() else 0
    return {"cpu": processes * max(1, config.train.threads), "gpu": gpus}


def run_folder_of(folder: Path, fields: dict[str, Any]) -> Path | None:
    """The run folder in `folder` (a comparison's, a sweep's) whose config.yaml has these
    dotted fields' values (a pair's method and seed, a grid point's), if one was started. A
    sweep of older code may have left a point two: the oldest with a summary, else the oldest."""
    import yaml

    from rollverify.infra.nested_dicts import config_fields

    found = [
        config_file.parent
        for config_file in sorted(folder.glob("*/config.yaml"))
        if all(
            config_fields(yaml.safe_load(config_file.read_text()) or {}).get(name) == value
            for name, value in fields.items()
        )
    ]
    return min(found, key=lambda run: not (run / "summary.json").is_file(), default=None)


def run_child(config, run_dir, on_step, parent_run_id, engine) -> RunSummary:
    """The run of a pair or grid point, trained once whatever stopped its parent before: a
    new run if `run_dir` is None; the run as it is if it trained all its steps (its end
    completed if a stop cut it off: training/run_end.py); else its stopped run resumed from
    its last checkpoint. A kept or resumed run must have this config (what resume may change
    aside)."""
    import yaml

    from rollverify.config import ConfigError
    from rollverify.infra.nested_dicts import config_fields
    from rollverify.training.checkpoint.run_state import config_changes
    from rollverify.training.run import resume, train
    from rollverify.training.run_end import finished_run
    from rollverify.training.run_folder import wait_for_its_process

    if run_dir is None:
        return train(config, on_step=on_step, parent_run_id=parent_run_id, engine=engine)
    wait_for_its_process(run_dir)  # a stopped sweep's trial may still be on it (run_folder.py)
    summary = finished_run(run_dir)
    if summary is None:
        overrides = config_fields(config.to_dict())  # refused where it breaks the run
        return resume(
            run_dir, overrides, on_step=on_step, engine=engine, parent_run_id=parent_run_id
        )
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    problems = config_changes(saved, config.to_dict())
    if saved["train"]["steps"] != config.train.steps:
        problems.append(
            f"train.steps: it trained {saved['train']['steps']} steps, {config.train.steps} "
            "now; compare with the same --steps (rvctl resume RUN --steps N extends one run)"
        )
    if problems:
        raise ConfigError([f"{run_dir.name}: {p}" for p in problems])
    on_step(summary.steps, {})
    return summary
