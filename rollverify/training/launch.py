"""A run of train.processes > 1 on this machine: torchrun's launcher (torch.distributed.run's
own API) starts one worker per process (`python -m rollverify.training.worker RUN_DIR`, the
entry point torchrun runs on every node of a multi-machine run too: docs/distributed.md).

This process prepares the run folder (config.yaml, its MLflow run, so a parent run's child is
its child from the start), follows rank 0's progress (RUN/progress.jsonl) and returns the
summary rank 0 wrote. torchrun watches the workers: when one dies, it stops the others, and
this process says which rank died, in one line; the last good checkpoint stays resumable.
A Ctrl-C / SIGTERM here reaches the workers once (torchrun sends it on; each worker has its
own session, so the terminal's does not): rank 0 stops after the step, as one process would.
Everything it starts listens on loopback only (loopback_stores.py).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rollverify.training.checkpoint.files import newest_step
from rollverify.training.distributed.loopback_stores import loopback_stores
from rollverify.training.run_plan import RunPlan, RunSummary

PROGRESS = "progress.jsonl"  # rank 0's logged steps, one JSON line each, for the launcher
INTERRUPTED = 130  # a worker that stopped on request (RunInterrupted), as a shell reports it
SHUTDOWN_SECONDS = 300  # a stopped worker's grace to finish its step and write a checkpoint


class RankFailed(RuntimeError):
    """A worker process failed; every other was stopped."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def launch(plan: RunPlan, prepare: Callable[[RunPlan], None]) -> RunSummary:
    """Run `plan` on train.processes workers; `prepare` writes the folder and MLflow run."""
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    prepare(plan)
    progress = plan.run_dir / PROGRESS
    progress.unlink(missing_ok=True)
    config = launch_config(plan.config.train.processes)
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)  # ours: 1 line
    # torchrun's CLI sets this for its workers (accelerate warns where it is unset); the run's
    # own train.threads still applies in each worker
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, plan.config.train.threads)))
    follower = _Follower(progress, plan.on_step)
    follower.start()
    # torchrun sets its handlers in the main thread (not in a Ray trial's): put ours back
    main_thread = threading.current_thread() is threading.main_thread()
    handlers = (
        {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main_thread else {}
    )
    try:
        with loopback_stores():
            elastic_launch(config, sys.executable)(
                "-m", "rollverify.training.worker", str(plan.run_dir)
            )
    except SignalException:  # torchrun sent it on to the workers and waited for them
        raise _interrupted(plan.run_dir) from None
    except ChildFailedError as failed:
        codes = {f.exitcode for f in failed.failures.values()}
        if codes <= {INTERRUPTED, -signal.SIGTERM, -signal.SIGINT} and INTERRUPTED in codes:
            raise _interrupted(plan.run_dir) from None  # (a signal sent to the workers)
        rank, failure = _cause(failed.failures)
        raise RankFailed(_failure_line(plan.run_dir, rank, failure), _exit_code(failure)) from None
    finally:
        follower.stop()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    summary = json.loads((plan.run_dir / "summary.json").read_text())
    return RunSummary(**summary)


def launch_config(processes: int):
    """torchrun --standalone's settings, all on loopback: the rendezvous store on a free port
    of 127.0.0.1, and this node's address 127.0.0.1 (where the ranks find the store they share;
    torch would take the host's name, which may resolve to an address the store does not
    listen on: loopback_stores.py)."""
    from torch.distributed.launcher.api import LaunchConfig

    return LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=processes,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        rdzv_configs={"is_host": True},
        local_addr="127.0.0.1",
        max_restarts=0,  # a dead rank stops the run: resume it from its last checkpoint
        monitor_interval=0.5,
        shutdown_timeout=SHUTDOWN_SECONDS,
    )


def _interrupted(run_dir: Path):
    """Rank 0 stopped after a step and wrote its checkpoint: the run's RunInterrupted."""
    from rollverify.training.stopping import RunInterrupted

    step = newest_step(run_dir / "checkpoints")
    return RunInterrupted(step or 0, run_dir if step is not None else None)


def _cause(failures: dict) -> tuple[int, Any]:
    """The failure that stopped the run: a rank killed from outside (OOM killer, a node's
    preemption) before any that failed on its own, then the earliest. (The others then fail
    on a lost connection, or are stopped by torchrun: SIGTERM.)"""
    stopped = (-signal.SIGTERM, -signal.SIGINT, INTERRUPTED)
    candidates = [(r, f) for r, f in failures.items() if f.exitcode not in stopped] or list(
        failures.items()
    )
    killed = [(r, f) for r, f in candidates if f.exitcode < 0]
    return min(killed or candidates, key=lambda item: item[1].timestamp)


def _failure_line(run_dir: Path, rank: int, failure) -> str:
    said = ""
    if failure.exitcode < 0:  # (torchrun's message only repeats the signal)
        how = f"was killed ({signal.Signals(-failure.exitcode).name})"
    else:
        how = f"exited with code {failure.exitcode}"
        message = failure.message if isinstance(failure.message, str) else ""
        said = f": {message.strip().splitlines()[0]}" if message.strip() else ""
    where = f"step {newest_step(run_dir / 'checkpoints') or 0}"
    return (
        f"rank {rank} {how}{said}; every rank was stopped; rvctl resume {run_dir} continues "
        f"from {where}"
    )


def _exit_code(failure) -> int:
    return 2 if failure.exitcode == 2 else 1


class _Follower:
    """Rank 0's logged steps (RUN/progress.jsonl) handed to `on_step` as they arrive."""

    def __init__(self, path: Path, on_step: Callable[[int, dict[str, float]], None]) -> None:
        self.path, self.on_step = path, on_step
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.read = 0

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()
        self._read_new()  # the last lines, written just before the workers ended

    def _follow(self) -> None:
        while not self.done.wait(0.5):
            self._read_new()

    def _read_new(self) -> None:
        if not self.path.is_file():
            return
        with self.path.open() as handle:
            handle.seek(self.read)
            for line in handle:
                if not line.endswith("\n"):  # being written: read it next time
                    break
                self.read += len(line)
                record = json.loads(line)
                self.on_step(record["step"], record["metrics"])
