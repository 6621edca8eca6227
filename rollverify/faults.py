"""Fault injection for the kill-anywhere tests: SIGKILL this process at a named point.

    ROLLVERIFY_KILL_AT=checkpoint-write:4   die while writing the step-4 checkpoint

Points: rollout (in the middle of a step's rollout), train (after the optimizer step, before
the weight sync), log (after the step's metrics reached MLflow), checkpoint-write (tensors
written, manifest not yet). The step is the one being trained (rollout of step 3: `rollout:3`).
A real SIGKILL: no handler, no cleanup, exactly what a preempted or OOM-killed job sees.
Unset (always, outside tests), `kill_point` costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENVIRONMENT = "ROLLVERIFY_KILL_AT"


def kill_point(point: str, step: int) -> None:
    """SIGKILL the process if ROLLVERIFY_KILL_AT names this point and step."""
    wanted = os.environ.get(ENVIRONMENT)
    if wanted and wanted == f"{point}:{step}":
        os.kill(os.getpid(), signal.SIGKILL)
