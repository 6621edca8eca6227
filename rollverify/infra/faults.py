"""One-line descriptions of real faults (a run's error as its parent reports it, under Ray's
wrappers). The injected ones, for the kill-anywhere tests: kill_points.py."""

from __future__ import annotations


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
