"""Trials lost with a node: a sweep on a cluster (`--address`) whose worker node goes away
(preempted, a dead host) has the trials that ran there end in Ray's error for a dead actor.
The sweep runs them again, each resuming its grid point's run from its last checkpoint
(sweep.train_point: a finished point is never trained twice), up to ROUNDS times; a trial that
failed on an error of its own still fails once, as it did."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

ROUNDS = 3  # a sweep that keeps losing nodes stops retrying after this many


def lost_with_a_node(error: BaseException | None) -> bool:
    """Ray's error for a trial whose worker (an actor) died, its node lost among the causes:
    not the trial's own error (that comes wrapped in a RayTaskError)."""
    from ray.exceptions import RayActorError, RayTaskError

    return isinstance(error, RayActorError) and not isinstance(error, RayTaskError)


def refit_lost(results: Any, refit: Callable[[], Any]) -> Any:
    """Tune's results, with the trials lost with a node run again (`refit`: Tune restored,
    errored trials restarted) while any is, up to ROUNDS times; one line each time."""
    for _ in range(ROUNDS):
        lost = [error for error in results.errors if lost_with_a_node(error)]
        if not lost:
            break
        warnings.warn(
            f"sweep: {len(lost)} trial(s) lost with their node ({type(lost[0]).__name__}); "
            "running them again, each from its run's last checkpoint",
            stacklevel=2,
        )
        results = refit()
    return results
