"""One process of a multi-process run, as torchrun starts it on every node:

    python -m rollverify.training.worker RUN_DIR            a run folder: rvctl prepared it
                                                            (launch.py), or continue it
    python -m rollverify.training.worker --config FILE      a new run (rank 0 makes the folder
                                        [--output DIR]      under output and tells the others)

Rank 0 plans the run (the folder, the checkpoint to continue from) and tells the other ranks;
then every rank runs the recipe (run.py) as its part of the world (world.py). Rank 0's logged
steps go to RUN/progress.jsonl for the launcher. A failure goes to torchrun's error file (the
launcher names the rank, in one line); exit 130 after a stop request, 2 for bad input, 1
otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from rollverify.infra.quiet import quiet_environment

USAGE, FAILED, INTERRUPTED = 2, 1, 130


def main(argv: list[str] | None = None) -> int:
    quiet_environment()
    args = _arguments(argv)
    from rollverify.training.distributed.world import World

    world = World.joined()
    _stop_with_the_launcher()
    try:
        plan = _agreed_plan(args, world)
        if isinstance(plan, int):  # rank 0 found nothing to do (a finished run): its exit
            return plan
        from rollverify.training.run import run

        run(plan)
        world.leave()
        if world.rank > 0:
            _exit_now()  # (rank 0 exits as usual: its MLflow run and files are closed by now)
        return 0
    except KeyboardInterrupt:  # RunInterrupted: the checkpoint is written
        return INTERRUPTED
    except Exception as error:
        return _failed(error)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rollverify.training.worker")
    parser.add_argument("run_dir", nargs="?", type=Path, help="a run folder to start or continue")
    parser.add_argument("--config", type=Path, help="a new run of this config")
    parser.add_argument("--output", type=Path, help="the new run's output folder")
    args = parser.parse_args(argv)
    if (args.run_dir is None) == (args.config is None):
        parser.error("give RUN_DIR or --config FILE")
    return args


def _agreed_plan(args: argparse.Namespace, world):
    """Rank 0's plan, on every rank (the others read the checkpoint it chose); or the exit
    code of every rank when rank 0 planned nothing to run."""
    from rollverify.config import load_config
    from rollverify.infra.nested_dicts import config_fields
    from rollverify.training.checkpoint.files import load
    from rollverify.training.resume_plan import RunFinished, resume_plan
    from rollverify.training.run import RunPlan, run_dir_for

    shared = None
    plan = None
    if world.main:
        try:
            if args.run_dir is not None:
                plan = resume_plan(args.run_dir)
            else:
                overrides = {"output": str(args.output)} if args.output else {}
                config = load_config(args.config, overrides)
                plan = RunPlan(config, run_dir_for(config))
            plan.on_step = _progress_writer(plan.run_dir)
            folder = plan.checkpoint.folder if plan.checkpoint is not None else None
            shared = {
                "config": plan.config.to_dict(),
                "run_dir": str(plan.run_dir),
                "checkpoint": str(folder) if folder is not None else None,
            }
        except RunFinished as finished:
            print(finished, file=sys.stderr)
            world.broadcast({"exit": 0})
            return 0
        except Exception:
            world.broadcast({"exit": USAGE})
            raise
    shared = world.broadcast(shared)
    if "exit" in shared:
        return shared["exit"]
    if world.main:
        return plan
    config = load_config(overrides=config_fields(shared["config"]))
    checkpoint = load(Path(shared["checkpoint"])) if shared["checkpoint"] else None
    return RunPlan(config, Path(shared["run_dir"]), checkpoint)


def _stop_with_the_launcher() -> None:
    """A worker whose launcher died (torchrun killed, a Ray trial's actor killed) asks itself
    to stop, as a SIGTERM would (rank 0 checkpoints after the step): workers run in their own
    sessions, so nothing else would tell them."""
    launcher = os.getppid()

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="launcher-watch").start()


def _progress_writer(run_dir: Path):
    """on_step for rank 0: each logged step as a line of RUN/progress.jsonl (launch.py)."""
    path = run_dir / "progress.jsonl"

    def write(step: int, metrics: dict[str, float]) -> None:
        with path.open("a") as handle:
            handle.write(json.dumps({"step": step, "metrics": metrics}) + "\n")

    return write


def _failed(error: Exception) -> int:
    """Recorded in torchrun's error file, not printed: the launcher prints one line naming
    the rank that failed first (torchrun itself, its root cause), and the other ranks' errors
    are only that they lost it."""
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    if os.environ.get("RVCTL_DEBUG"):
        raise error
    ErrorHandler().record_exception(error)
    usage = isinstance(error, (ValueError, FileNotFoundError, PermissionError))
    return USAGE if usage or getattr(error, "exit_code", None) == USAGE else FAILED


def _exit_now() -> None:
    """A rank other than 0, its run finished and its process group torn down: exit 0 without
    the interpreter's teardown. In it, a C++ thread of gloo's or of the store's could still be
    joinable when destroyed, and the rank died of SIGABRT ("terminate called without an
    active exception") after a finished run, in 2 of 3 `make test`s on 2 cores even with the
    group torn down first; the launcher then reported the run as failed. Nothing is left to
    write on these ranks."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
