"""A row's tokens (SimulatedEngine._flush with Sketch.generate), and a trajectory leaving the
engine: out (its slot and counts), its group woken if it was the group's last inside."""

from __future__ import annotations

from numba import njit

from rollverify.rollout.engines.kernel.arrays import (
    ADMITTED_AT,
    BASE,
    CONTEXT0,
    FINAL,
    GENERATED,
    GROUP,
    HIGH_WATER,
    LENGTH,
    LENGTH_CUT,
    MAX_NEW,
    OLDEST,
    OUT,
    PROMPT,
    REASON,
    REGENERATED,
    ROW_ID,
    ROWS,
    STOP,
    VERSION,
    WAKE,
)


@njit(cache=True)
def context_of(trajs, slot):
    return trajs[slot, PROMPT] + trajs[slot, LENGTH]


@njit(cache=True)
def flush(ints, trajs, slot, at):
    """SimulatedEngine._flush with Sketch.generate: the row's tokens up to step `at`."""
    count = min(at - trajs[slot, ADMITTED_AT] + 1, trajs[slot, FINAL] - trajs[slot, LENGTH])
    ints[GENERATED] += count
    start = trajs[slot, LENGTH]
    trajs[slot, LENGTH] = end = start + count
    if count and trajs[slot, OLDEST] == -1:
        trajs[slot, OLDEST] = ints[VERSION]
    before = trajs[slot, HIGH_WATER]
    trajs[slot, HIGH_WATER] = max(before, end)
    ints[REGENERATED] += max(0, min(end, before) - start)
    if end >= trajs[slot, FINAL]:
        trajs[slot, REASON] = LENGTH_CUT if trajs[slot, FINAL] >= ints[MAX_NEW] else STOP


@njit(cache=True)
def emit(trajs, out, at, slot):
    """A trajectory leaving the engine, into row `at` of `out`: its slot and what it carries
    back (OUT)."""
    out[at, 0] = slot
    for column in range(1, len(OUT)):
        out[at, column] = trajs[slot, OUT[column]]


@njit(cache=True)
def finished_out(ints, trajs, members, out, at, slot):
    """A finished trajectory out; WAKE if it was its group's last in the engine (the group
    may be complete: a schedule acts on that)."""
    emit(trajs, out, at, slot)
    members[trajs[slot, GROUP]] -= 1
    if members[trajs[slot, GROUP]] == 0:
        ints[WAKE] = 1


@njit(cache=True)
def leave(ints, trajs, slot):
    """The row stops running; returns its offset (base - admitted at)."""
    offset = trajs[slot, BASE] - trajs[slot, ADMITTED_AT]
    trajs[slot, ROW_ID] = -1
    ints[ROWS] -= 1
    ints[CONTEXT0] -= offset
    return offset
