"""Sweeps: a grid of config values, one training run per point and seed, on Ray Tune.

Ray Tune expands the grid and schedules the trials by their resources (a local Ray by
default, `address` for a cluster). Every trial is an MLflow child of the sweep's parent run.
The sweep folder holds `parent.json`, Tune's experiment state (`trials/`) and the trials' run
folders, so a sweep that was stopped resumes (`resume=True`): Tune runs again what its state
had not seen end, and each such trial goes on with its grid point's run (train_point), so a
point is trained once whatever moment the stop came (docs/checkpoints.md).
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from rollverify.config import RunConfig, with_overrides
from rollverify.core.methods import METHODS
from rollverify.experiments.child_runs import open_parent, run_child, run_folder_of, trial_resources
from rollverify.experiments.lost_trials import refit_lost
from rollverify.experiments.parent_record import record_report
from rollverify.infra.faults import one_line, own_error
from rollverify.infra.kill_points import kill_point
from rollverify.infra.nested_dicts import config_fields, flatten
from rollverify.infra.paths import locate
from rollverify.training.run_plan import RunSummary

SWEEPS = Path("sweeps")  # in the working directory, else the package's (rollverify/infra/paths.py)


@dataclass
class Grid:
    method: str
    seeds: int
    values: dict[str, list[Any]]  # dotted config field -> values

    @property
    def size(self) -> int:
        size = self.seeds
        for values in self.values.values():
            size *= len(values)
        return size


@dataclass
class SweepResult:
    folder: Path
    parent_run_id: str
    tracking_uri: str
    trials: list[dict[str, Any]]


def resolve_name(name: str) -> str:
    """A short or dotted name -> the dotted config field (`ds` -> `verify.ds`)."""
    dotted = list(flatten(RunConfig().to_dict()))
    if name in dotted:
        return name
    for match in (
        [d for d in dotted if d.rsplit(".", 1)[-1] == name],
        [d for d in dotted if d.rsplit(".", 1)[-1].endswith("_" + name)],
    ):
        if len(match) == 1:
            return match[0]
        if len(match) > 1:
            raise ValueError(f"sweep name {name!r} is ambiguous ({', '.join(match)}); use one")
    raise ValueError(f"sweep name {name!r}: no such config field; use e.g. ds, dt, verify.window")


def load_grid(
    names: list[str],
    overrides: dict[str, str],
    seeds: int | None = None,
    method: str | None = None,
) -> Grid:
    """The grid of sweeps/<names>.yaml (here, else the shipped one), with `--name v1,v2`
    overrides applied, and `--seeds` and `--method` (when given) in place of the spec's."""
    if seeds is not None and seeds < 1:
        raise ValueError(f"--seeds {seeds}: needs at least 1 seed per grid point")
    dotted = [resolve_name(n) for n in names]
    spec_file = SWEEPS / f"{'_'.join(n.rsplit('.', 1)[-1] for n in names)}.yaml"
    found = locate(spec_file)
    spec_file = found if found is not None and found.is_file() else spec_file
    spec = yaml.safe_load(spec_file.read_text()) if spec_file.is_file() else {}
    values = {resolve_name(k): v for k, v in (spec.get("grid") or {}).items()}
    for name, text in overrides.items():
        field = resolve_name(name)
        if field not in dotted:
            raise ValueError(f"--{name}: not swept; add it to the names (rvctl sweep ... {name})")
        values[field] = [_number(v) for v in text.split(",") if v.strip()]
    missing = [n for n, d in zip(names, dotted, strict=True) if not values.get(d)]
    if missing:
        raise ValueError(
            f"sweep {' '.join(names)}: no values for {', '.join(missing)}; pass "
            f"--{missing[0]} v1,v2 or write {spec_file}"
        )
    if method is not None and method not in METHODS:
        near = difflib.get_close_matches(method, list(METHODS), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise ValueError(f"--method {method}: unknown{hint}; one of {', '.join(METHODS)}")
    method = method or spec.get("method", "rollverify")
    if method not in METHODS:
        raise ValueError(f"{spec_file}: method {method!r} unknown; one of {', '.join(METHODS)}")
    seeds = int(spec.get("seeds", 1)) if seeds is None else seeds
    return Grid(method, seeds, {d: values[d] for d in dotted})


def grid_points(grid: Grid) -> list[dict[str, Any]]:
    """Every point of the grid (seeds aside), in Tune's order of expansion."""
    points: list[dict[str, Any]] = [{}]
    for field, values in grid.values.items():
        points = [point | {field: value} for value in values for point in points]
    return points


def point_name(point: dict[str, Any]) -> str:
    return " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in point.items())


def check_grid(config: RunConfig, grid: Grid, address: str | None = None) -> None:
    """Before Ray starts: every grid point's start checks, a bad point named with each of its
    problems; the cluster's address (preflight.check_variants)."""
    from rollverify.training.preflight import check_variants

    base = with_overrides(config, {"train.method": grid.method})
    points = {f"grid point {point_name(p)}": p for p in grid_points(grid)}
    check_variants(base, points, address)


class TrialsFailed(RuntimeError):
    """Trials of a sweep failed; the message has a line per trial (its grid point, its error)."""

    exit_code = 1


def _number(text: str) -> Any:
    text = text.strip()
    if text.lower() in ("true", "false"):  # a switch: --keep_kv false,true
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)  # "inf" too
        except ValueError:
            return text


def sweep(
    config: RunConfig,
    grid: Grid,
    folder: Path | None = None,
    address: str | None = None,
    on_progress: Callable[[int, int], None] = lambda finished, total: None,
) -> SweepResult:
    """Run (or, with an existing `folder`, resume) the sweep. Every grid point is checked
    first (check_grid); trials that fail raise TrialsFailed once the others are done."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # so verbose=0 means quiet: we draw progress
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "0")  # save Tune's state at every change
    from ray import tune

    from rollverify.rollout.engines.ray_runtime import ensure_ray, stop_ray
    from rollverify.tracking.tracker import MLflowTracker

    if folder is not None:
        config, grid = _read_plan(folder)
    check_grid(config, grid, address)
    if folder is None:
        name = "sweep-" + "-".join(n.rsplit(".", 1)[-1] for n in grid.values)
        tags = {"sweep_params": ",".join(grid.values), "method": grid.method}
        parent, folder, uri = open_parent(config, "sweep", name, tags)
        run_id = parent.run_id
        _write_plan(folder, config, grid)
    else:
        record = json.loads((folder / "parent.json").read_text())
        run_id, uri = record["run_id"], record["tracking_uri"]
        parent = MLflowTracker.attach(uri, run_id)
    base = trial_base(config, grid, folder, uri)
    space = {d: tune.grid_search(v) for d, v in grid.values.items()}
    space["train.seed"] = tune.grid_search([config.train.seed + i for i in range(grid.seeds)])
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, base=base, parent_run_id=run_id),
        trial_resources(config),
    )
    ensure_ray(address, field="--address")
    status = "FAILED"
    watcher = ChildWatcher(uri, run_id, grid.size, on_progress)
    try:
        trials = folder.resolve() / "trials"
        if tune.Tuner.can_restore(str(trials)):
            tuner = _restored(trials, trainable)
        else:
            tuner = tune.Tuner(
                trainable,
                param_space=space,
                run_config=tune.RunConfig(
                    name="trials", storage_path=str(folder.resolve()), verbose=0
                ),
            )
        watcher.start()
        with _tune_quiet():  # a failed trial is told once, by TrialsFailed, in one line
            results = refit_lost(tuner.fit(), lambda: _restored(trials, trainable).fit())
        status = "FINISHED" if not results.errors else "FAILED"
        if status == "FINISHED":
            record_report(parent, folder)
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        watcher.stop()
        parent.finish(status)
        stop_ray()
    errors = [r for r in results if r.error is not None]
    if errors:
        failed = TrialsFailed("\n".join(trial_failure(r.config, r.error) for r in errors))
        # the trials' own input (every one a ValueError: a reward, data) is the user's: 2
        user_input = all(isinstance(own_error(r.error), ValueError) for r in errors)
        failed.exit_code = 2 if user_input else 1
        failed.hint = f"each trial's traceback: {folder / 'trials'}/*/error.txt"
        raise failed
    trials_done = [dict(r.metrics or {}) | {"config": r.config} for r in results]
    return SweepResult(folder, run_id, uri, trials_done)


def _restored(trials: Path, trainable: Any) -> Any:
    """Tune's saved sweep, its unfinished and errored trials to run (again)."""
    from ray import tune

    return tune.Tuner.restore(str(trials), trainable, resume_unfinished=True, restart_errored=True)


def trial_base(config: RunConfig, grid: Grid, folder: Path, uri: str) -> dict[str, Any]:
    """Every trial's config before its grid point. The model path is the config's as loaded
    (load_config made a model found here absolute, as trials run in Tune's folders, and kept a
    shipped one by its name, so a trial resumed after the package moved still matches)."""
    return config_fields(config.to_dict()) | {
        "output": str(folder.resolve()),
        "tracking.uri": uri,
        "train.method": grid.method,
    }


def trial_failure(params: dict[str, Any], error: BaseException) -> str:
    """`trial ds=0.01 seed=0: <the trial's own error, one line>`: Ray's wrappers taken off."""
    fields = {k: v for k, v in params.items() if k != "train.seed"}
    name = point_name(fields | {"seed": params.get("train.seed")})
    return f"trial {name}: {one_line(own_error(error))}"


@contextlib.contextmanager
def _tune_quiet():
    import logging

    tune_logger = logging.getLogger("ray.tune")
    level = tune_logger.level
    tune_logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        tune_logger.setLevel(level)


def run_trial(params: dict[str, Any], base: dict[str, Any], parent_run_id: str) -> None:
    """One grid point, in a Ray worker: train it (once: train_point), report the summary to
    Tune."""
    from rollverify.infra.quiet import quiet_environment

    quiet_environment()  # before TRL and transformers load in this worker
    from ray import tune

    from rollverify.config import load_config

    config = load_config(overrides=base | params)
    summary = train_point(config, list(params), parent_run_id)
    kill_point("end-tune", config.train.steps)  # tests: the point's run closed, Tune not told
    tune.report({k: v for k, v in asdict(summary).items() if v is not None})


def train_point(config: RunConfig, fields: list[str], parent_run_id: str) -> RunSummary:
    """The run of the grid point `config` is at (its values of `fields`, the swept ones and
    the seed): a new one; or the one a stopped sweep left in the sweep's folder, kept if it
    trained all its steps (its end completed if the stop cut it off), else resumed from its
    last checkpoint. Tune's saved state may predate any of these: whatever it reruns, a
    point is trained once, in one folder and one MLflow run."""
    resolved = config_fields(config.to_dict())  # a grid's `--dt 2` is the field's 2.0
    point = {name: resolved[name] for name in [*fields, "train.method"]}
    run_dir = run_folder_of(Path(config.output), point)
    return run_child(config, run_dir, lambda step, metrics: None, parent_run_id, engine=None)


class ChildWatcher(threading.Thread):
    """Counts the parent's finished child runs every few seconds, for a progress bar (Tune's
    own callbacks would be pickled into its experiment state)."""

    def __init__(self, uri: str, parent_run_id: str, total: int, report) -> None:
        super().__init__(daemon=True)
        self.uri, self.parent_run_id, self.total, self.report = uri, parent_run_id, total, report
        self.stopping = threading.Event()

    def finished(self) -> int:
        from mlflow.tracking import MlflowClient

        from rollverify.tracking.tracker import child_runs

        runs = child_runs(MlflowClient(self.uri), self.parent_run_id, finished_only=True)
        return len(runs)

    def run(self) -> None:
        while not self.stopping.wait(2.0):
            with contextlib.suppress(Exception):  # a busy store: try again next time
                self.report(self.finished(), self.total)

    def stop(self) -> None:
        self.stopping.set()
        with contextlib.suppress(Exception):
            self.report(self.finished(), self.total)


def _write_plan(folder: Path, config: RunConfig, grid: Grid) -> None:
    from rollverify.infra.atomic_write import atomic_write_text

    plan = {"config": config.to_dict(), "grid": asdict(grid)}
    atomic_write_text(folder / "sweep.yaml", yaml.safe_dump(plan, sort_keys=False))


def _read_plan(folder: Path) -> tuple[RunConfig, Grid]:
    from rollverify.config import load_config

    plan = yaml.safe_load((folder / "sweep.yaml").read_text())
    config = load_config(overrides=config_fields(plan["config"]))
    return config, Grid(**plan["grid"])
