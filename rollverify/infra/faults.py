"""Faults: injected ones for the kill-anywhere tests, and one-line descriptions of real ones.

`kill_point` SIGKILLs this process at a named point:

    ROLLVERIFY_KILL_AT=checkpoint-write:4   die while writing the step-4 checkpoint
    ROLLVERIFY_KILL_AT=rollout:3#10         the 10th time the rollout point is reached from
                                            step 3 on (a point reached many times a step)

Points: setup (the run's folder, config and MLflow run made, model loaded and engine
started, nothing trained or checkpointed: `setup:0`), rollout (the trainer waits for its
batch while the engine generates: each check for a stop), train (after the optimizer step,
before the weight sync), checkpoint-write (the step's metrics logged, its checkpoint's
tensors written, no manifest yet), tool-call (a task with a tool: as a tool call starts).
Asynchronous training (rollout.mode async), where work is in flight: weights-in-flight (the
step's update sent to the engine, not landed: its sequences stopped between two tokens for
it, none of its tensors loaded; in the engine's thread, the trainer trains on meanwhile),
regenerating (a trajectory verification cut is back in the engine, as the first engine step
that continues it ends). The step is the one being trained (rollout of step 3:
`rollout:3`). In a run of several processes, `train:2@1` kills rank 1 alone. A run's end, at
its last step N (training/run_end.py has the order): end-summary (the last checkpoint
written, no summary.json), end-mlflow (summary.json written, the MLflow run not closed),
end-tune (a sweep's trial: its run closed, Tune not told). docs/checkpoints.md says what a
resume recovers at each.
A real SIGKILL: no handler, no cleanup, exactly what a preempted or OOM-killed job sees.
Unset (always, outside tests), `kill_point` costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENVIRONMENT = "ROLLVERIFY_KILL_AT"
_reached = 0  # times the wanted point was reached from its step on, in this process


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
    at, _, nth = when.partition("#")
    if name != point or step < int(at) or (rank and rank != os.environ.get("RANK", "0")):
        return
    _reached += 1  # (two threads may count at once only at two points: never one wanted)
    if _reached >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)


def describe(error: BaseException) -> str:
    """`Type: first line of the message`, for one-line errors (a message may be empty)."""
    lines = str(error).splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def own_error(error: BaseException) -> BaseException:
    """A run's own error under Ray's wrappers (a task's, a Tune trial's: RayTaskError)."""
    import ray.exceptions

    while isinstance(error, ray.exceptions.RayTaskError) and error.cause is not None:
        error = error.cause
    return error


def one_line(error: BaseException) -> str:
    """A failed run's error as its parent (a comparison, a sweep) reports it: a ValueError's
    own first line (bad input found as the run went: its message names the field), else
    `Type: first line`."""
    lines = str(error).splitlines()
    if isinstance(error, ValueError) and lines:
        return lines[0] if len(lines) == 1 else f"{lines[0]} (+{len(lines) - 1} more)"
    return describe(error)
