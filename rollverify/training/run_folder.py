"""A run's folder: its name when it starts, as `rvctl resume` finds it, the config it resumes
with, and the lock of the one process that trains it. Light (no torch, no TRL), so a wrong
folder or config is told before anything heavy loads."""

from __future__ import annotations

import fcntl
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
    (whether it may: training/resume_plan.py, against the checkpoint)."""
    base = load_config(config_path if config_path is not None else run_dir / "config.yaml")
    return with_overrides(base, overrides or {})


def run_dir_for(config: RunConfig) -> Path:
    """A new run's folder: method, seed, time, and a random tag of 8 hex digits (a sweep's
    trials of one seed start in the same second, side by side)."""
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
    return Path(config.output) / f"{config.train.method}-s{config.train.seed}-{stamp}"


class RunBusy(RuntimeError):
    exit_code = 2  # a usage error: nothing was touched


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """One process per run folder: a second `rvctl resume` of a running run is refused."""
    with (run_dir / ".lock").open("a+") as handle:
        if not _locked(handle):
            raise _busy(run_dir)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def wait_for_its_process(run_dir: Path, seconds: float = 120.0) -> None:
    """Return once no process trains the run, raising RunBusy after `seconds`. A sweep's trial
    may outlive the sweep: Ray runs each worker in a process group of its own, so a SIGKILL of
    the sweep's group reaches it only when it sees its raylet gone (a tiny trial was seen
    training 11 more steps, 2.7 s). What to do with the run is decided after it."""
    deadline = time.monotonic() + seconds
    with (run_dir / ".lock").open("a+") as handle:
        while not _locked(handle):
            if time.monotonic() > deadline:
                raise _busy(run_dir)
            time.sleep(0.2)
        fcntl.flock(handle, fcntl.LOCK_UN)


def _locked(handle) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _busy(run_dir: Path) -> RunBusy:
    return RunBusy(
        f"RUN_DIR {run_dir}: another process is training this run; wait for it to end or "
        "stop it first"
    )
