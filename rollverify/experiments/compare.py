"""Comparisons: every (method, seed) pair as a child of one MLflow parent run.

Runs go one after another in this process and share one rollout engine (the vLLM sidecar
starts once: 23 s on our 2-core CPU once Ray is up, engine_start_seconds in
benchmarks/results/rollout_bench_vllm.json; each run resets it to the base weights and its own
seed); runs of several trainer processes (train.processes) start their own, in their rank 0.
Given a Ray cluster (`address`), the pairs run side by side there instead, one Ray task each
(compare_on_ray.py). The parent's folder holds `parent.json` (run id, tracking URI), which
`rvctl report` reads.

A comparison that was stopped (Ctrl-C, preemption, a crash) goes on with `resume_folder`:
the same parent run; finished pairs are not rerun, unfinished ones resume from their last
checkpoint in their own folder and MLflow run, the rest start.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from rollverify.config import ConfigError, RunConfig, with_overrides
from rollverify.core.methods import METHODS
from rollverify.experiments.child_runs import (
    Child,
    PairsFailed,
    latest_parent,
    open_parent,
    run_child,
    run_folder_of,
)
from rollverify.experiments.parent_record import record_report
from rollverify.infra.faults import one_line
from rollverify.training.run_plan import RunSummary


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
        near = difflib.get_close_matches(unknown[0], list(METHODS), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise ValueError(
            f"methods: unknown {', '.join(unknown)}{hint}; choose from {', '.join(METHODS)}"
        )
    if seeds < 1:
        raise ValueError(f"--seeds: must be >= 1, got {seeds}")
    return [Child(m, first_seed + i) for m in methods for i in range(seeds)]


def check_pairs(config: RunConfig, children: list[Child], address: str | None = None) -> None:
    """Before anything is written: every pair's start checks, the cluster's address
    (preflight.check_variants)."""
    from rollverify.training.preflight import check_variants

    pairs = {c.name: {"train.method": c.method, "train.seed": c.seed} for c in children}
    check_variants(config, pairs, address)


def compare(
    config: RunConfig,
    methods: list[str],
    seeds: int = 1,
    on_progress: ProgressFn = lambda child, step, metrics: None,
    resume_folder: Path | None = None,
    address: str | None = None,
) -> Comparison:
    children = plan(methods, seeds, config.train.seed)
    check_pairs(config, children, address)  # before the parent run and the engine
    if address is not None:
        from rollverify.rollout.engines.ray_runtime import ensure_ray

        ensure_ray(address, field="--address")
    tags = comparison_tags(methods, seeds)
    if resume_folder is None:
        parent, folder, uri = open_parent(config, "compare", "compare", tags)
    else:
        parent, folder, uri = reopen_parent(resume_folder, tags)
    runs_config = with_overrides(config, {"output": str(folder)})
    status = "FAILED"
    try:
        pairs = [
            (child, _child_config(runs_config, child, uri), child_folder(folder, child))
            for child in children
        ]
        if address is not None:
            from rollverify.experiments.compare_on_ray import run_pairs

            summaries = run_pairs(pairs, parent.run_id, address, on_progress)
        else:
            summaries = _run_here(pairs, runs_config, parent.run_id, on_progress)
        record_report(parent, folder)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        parent.finish(status)
    return Comparison(folder, parent.run_id, uri, summaries)


def _run_here(pairs, runs_config: RunConfig, parent_run_id: str, on_progress) -> list:
    """The pairs one after another in this process, on one shared engine."""
    from rollverify.training.parts import engine_running, make_engine

    # Several trainer processes: each run's rank 0 starts its own engine (a worker process
    # cannot use this one's).
    shared = runs_config.train.processes == 1
    engines = engine_running(make_engine(runs_config), runs_config) if shared else nullcontext()
    summaries = []
    with engines as engine:
        for child, config, run_dir in pairs:
            on_progress(child, -1, {})
            on_step = functools.partial(on_progress, child)
            try:
                summaries.append(run_child(config, run_dir, on_step, parent_run_id, engine))
            except ConfigError as error:  # e.g. a kept run of another config
                raise ConfigError([f"{child.name}: {p}" for p in error.problems]) from error
            except Exception as error:  # the later pairs would likely meet it too: stop
                failed = PairsFailed(
                    f"{child.name}: {one_line(error)}\n"
                    "the pairs after it did not run; fix it and go on: rvctl compare ... --resume"
                )
                # a bad input found as the run went is still the user's (2), else the run's own
                failed.exit_code = getattr(
                    error, "exit_code", 2 if isinstance(error, ValueError) else 1
                )
                raise failed from error
    return summaries


def _child_config(runs_config: RunConfig, child: Child, uri: str) -> RunConfig:
    fields = {"train.method": child.method, "train.seed": child.seed, "tracking.uri": uri}
    return with_overrides(runs_config, fields)


def reopen_parent(folder: Path, tags: dict[str, str]) -> tuple:
    """A stopped comparison's parent run, RUNNING again; (tracker, folder, uri)."""
    from rollverify.tracking.tracker import MLflowTracker

    record = check_comparison(folder, tags)
    uri = record["tracking_uri"]
    return MLflowTracker.attach(uri, record["run_id"]), folder, uri


def comparison_tags(methods: list[str], seeds: int) -> dict[str, str]:
    return {"methods": ",".join(methods), "seeds": str(seeds)}


def check_comparison(folder: Path, tags: dict[str, str]) -> dict[str, str]:
    """A comparison folder's parent.json, checked: it must compare these methods and seeds."""
    try:
        record = json.loads((folder / "parent.json").read_text())
    except (OSError, json.JSONDecodeError):
        raise ValueError(
            f"compare folder {folder}: no comparison here (no readable parent.json); pass a "
            "compare folder, or leave --resume out to start one"
        ) from None
    if record.get("kind") != "compare":
        raise ValueError(
            f"compare folder {folder}: a {record.get('kind')} folder, not a comparison"
        )
    for key, wanted in tags.items():
        if record.get(key) != wanted:
            raise ValueError(
                f"--resume: {folder.name} compares {key} {record.get(key)}, not {wanted}; run "
                "it with the same methods and --seeds, or leave --resume out"
            )
    return record


def latest_comparison(output: Path) -> Path:
    return latest_parent(output, "compare-*", "comparison")


def child_folder(folder: Path, child: Child) -> Path | None:
    """The run folder of `child` in a comparison's folder, if it was started."""
    return run_folder_of(folder, {"train.method": child.method, "train.seed": child.seed})
