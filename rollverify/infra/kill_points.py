"""The kill-anywhere tests' one hook: `kill_point(name, step)` SIGKILLs this process at a named
point when ROLLVERIFY_KILL_AT asks for it, and does nothing otherwise (one dictionary lookup:
the variable is unset outside tests). Each call site is one line; POINTS lists them all.

    ROLLVERIFY_KILL_AT=checkpoint-write:4   die while writing the step-4 checkpoint
    ROLLVERIFY_KILL_AT=rollout:3#10         the 10th time the rollout point is reached from
                                            step 3 on (a point reached many times a step)
    ROLLVERIFY_KILL_AT=train:2@1            rank 1 alone, in a run of several processes

The step is the one being trained (rollout of step 3: `rollout:3`); a run's end is at its last
step N (training/run_end.py has the order). A real SIGKILL: no handler, no cleanup, exactly
what a preempted or OOM-killed job sees. docs/checkpoints.md says what a resume recovers at
each point.
"""

from __future__ import annotations

import os
import signal
import time

ENVIRONMENT = "ROLLVERIFY_KILL_AT"

POINTS = {  # name -> the moment it names
    "setup": "the run's folder, config and MLflow run made, model loaded and engine started, "
    "nothing trained or checkpointed (`setup:0`)",
    "rollout": "the trainer waits for its batch while the engine generates: each check for a stop",
    "train": "after the optimizer step, before the weight sync",
    "checkpoint-write": "the step's metrics logged, its checkpoint's tensors written, no manifest",
    "tool-call": "a task with a tool: as a tool call starts",
    "weights-in-flight": "asynchronous: the step's update sent to the engine, not landed (its "
    "sequences stopped between two tokens for it, none of its tensors loaded; in the engine's "
    "thread, the trainer trains on meanwhile)",
    "regenerating": "asynchronous: a trajectory verification cut is back in the engine, as the "
    "first engine step that continues it ends",
    "end-summary": "the last checkpoint written, no summary.json",
    "end-mlflow": "summary.json written, the MLflow run not closed",
    "end-tune": "a sweep's trial: its run closed, Tune not told",
}

_reached = 0  # times the wanted point was reached from its step on, in this process

PHASES_ENVIRONMENT = "ROLLVERIFY_PHASES"  # a file: the run's phases, each as it begins


def phase_mark(phase: str, step: int) -> None:
    """Append `time phase step` to the file ROLLVERIFY_PHASES names, when it is set (the
    lost-node tests read which phase a kill met: generation, weight sync, evaluation,
    checkpoint, training); nothing otherwise."""
    path = os.environ.get(PHASES_ENVIRONMENT)
    if path:
        with open(path, "a") as phases:
            phases.write(f"{time.time():.3f} {phase} {step}\n")


def kill_point(point: str, step: int) -> None:
    """SIGKILL the process the Nth time (`#N`, default 1) it reaches the point
    ROLLVERIFY_KILL_AT names at its step or later (and, with `@rank`, only in the process of
    that torch.distributed rank: `train:2@1`). Called from any thread (the engine's too)."""
    global _reached
    wanted = os.environ.get(ENVIRONMENT)
    if not wanted:
        return
    here, _, rank = wanted.partition("@")
    name, _, when = here.partition(":")
    if name not in POINTS:  # a test asking for a point no code reaches would pass for nothing
        raise ValueError(f"{ENVIRONMENT}: no kill point {name!r}; one of {', '.join(POINTS)}")
    at, _, nth = when.partition("#")
    if name != point or step < int(at) or (rank and rank != os.environ.get("RANK", "0")):
        return
    _reached += 1  # (two threads may count at once only at two points: never one wanted)
    if _reached >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
