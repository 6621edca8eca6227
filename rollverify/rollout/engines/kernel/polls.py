"""The engine's polls (SimulatedEngine.poll without tool calls or weights in flight): the next
event, the decode up to it, a preemption if the blocks run out, an admission; run_polls polls
until a schedule has something to act on. A pause empties the engine."""

from __future__ import annotations

from numba import njit

from rollverify.rollout.engines.kernel.admission import admissible, admit, head_fits
from rollverify.rollout.engines.kernel.arrays import (
    ABORTED,
    B_OFFSETS,
    B_ROWS,
    CONTEXT0,
    COUNT,
    ENTRIES,
    FINISHES_PER_POLL,
    FREE_NODE,
    FREED,
    GROW,
    H_SIZE,
    KV_BLOCKS,
    NEXT,
    NO_LIMIT,
    Q_HEAD,
    Q_TAIL,
    R_TAIL,
    ROW_ID,
    ROWS,
    SLOTS,
    SPAN,
    STALE,
    STEP,
    WAKE,
)
from rollverify.rollout.engines.kernel.decode import decode
from rollverify.rollout.engines.kernel.kv_blocks import blocks_at, first_step_over
from rollverify.rollout.engines.kernel.preemption import preempt
from rollverify.rollout.engines.kernel.rows import emit, flush


@njit(cache=True)
def _steps_to_next_event(ints, trajs, queue, ends, spans, padding):
    waiting = ints[Q_TAIL] > ints[Q_HEAD]
    if (
        waiting
        and admissible(ints, ints[SLOTS] - ints[ROWS])
        and head_fits(ints, trajs, queue, padding)
    ):
        return 1
    wanted = min(ints[FINISHES_PER_POLL], ints[ENTRIES])  # entries of rows that left count too
    end, seen = ints[STEP] + 1, 0
    while True:  # the end of the wanted-th entry
        bucket = end & (ends.shape[0] - 1)
        if bucket % SPAN == 0 and seen + spans[bucket // SPAN] < wanted:
            seen += spans[bucket // SPAN]  # a span all of whose entries come first
            end += SPAN
            continue
        seen += ends[bucket, COUNT]
        if seen >= wanted:
            return max(1, end - ints[STEP])
        end += 1


@njit(cache=True)
def _poll(state, members, out, count, admitted):
    """SimulatedEngine.poll without tool calls or weights in flight: the trajectories that
    finish go to out[count:]; returns the new count. `state`: run_polls's arrays."""
    ints, floats, trajs, queue, run, ends, spans, nodes, padding, pads, heap, prices = state
    if ints[ROWS]:
        steps = _steps_to_next_event(ints, trajs, queue, ends, spans, padding)
        full = -1
        if ints[KV_BLOCKS] != NO_LIMIT:
            full = first_step_over(
                ints, padding, ints[STEP] + 1, ints[STEP] + steps, ints[KV_BLOCKS]
            )
        if full != -1:
            if full > ints[STEP] + 1:
                jump = full - ints[STEP] - 1
                count = decode(
                    ints, floats, trajs, ends, spans, nodes, padding, pads, prices, jump, members,
                    out, count,
                )  # fmt: skip
            if preempt(ints, trajs, queue, run, ends, spans, nodes, padding, pads, full):
                return count  # vLLM admits nothing in a step that preempted
            return admit(state, members, out, count, admitted)
        count = decode(
            ints, floats, trajs, ends, spans, nodes, padding, pads, prices, steps, members, out,
            count,
        )  # fmt: skip
    return admit(state, members, out, count, admitted)


@njit(cache=True)
def _compact(ints, trajs, run):
    """Room at `run`'s end: the rows that left, out."""
    kept = 0
    for i in range(ints[R_TAIL]):
        if trajs[run[i, 0], ROW_ID] == run[i, 1]:
            _move(run, i, kept)
            kept += 1
    ints[R_TAIL] = kept


@njit(cache=True)
def _move(table, source, target):
    """One row of a small table to another (scalar copies: a row slice costs more)."""
    for column in range(table.shape[1]):
        table[target, column] = table[source, column]


@njit(cache=True)
def run_polls(
    ints,
    floats,
    trajs,
    queue,
    run,
    ends,
    spans,
    nodes,
    padding,
    pads,
    heap,
    prices,
    members,
    out,
    admitted,
):
    """Poll until what finished (out[:count], returned) is something a schedule acts on: a
    group's last trajectory in the engine finished (the group may be complete), or a slot is
    idle (partial rollout starts a group). Until then it would only take note of them, and a
    schedule that polls again meanwhile changes nothing, so this need not return. Returns at
    the first poll that finishes anything if `out` runs short, 0 when nothing is left to run,
    GROW if an array needs room first (CompiledSimulatedEngine._room)."""
    slots, count = ints[SLOTS], 0
    ints[WAKE] = 0
    state = (ints, floats, trajs, queue, run, ends, spans, nodes, padding, pads, heap, prices)
    while ints[ROWS] or ints[Q_TAIL] > ints[Q_HEAD]:
        if ints[R_TAIL] + slots >= run.shape[0]:
            _compact(ints, trajs, run)
        short = ints[Q_HEAD] < slots or ints[H_SIZE] + slots >= heap.shape[0]
        if short or nodes.shape[0] - ints[ENTRIES] <= slots or count + 2 * slots >= out.shape[0]:
            return count if count else GROW
        count = _poll(state, members, out, count, admitted)
        idle = slots - ints[ROWS] - (ints[Q_TAIL] - ints[Q_HEAD]) > 0
        if count and (ints[WAKE] or idle):
            return count
    return count


@njit(cache=True)
def pause(ints, trajs, queue, run, ends, spans, nodes, padding, out):
    """Everything running (flushed, in the order admitted) then queued, into out; returns the
    count. The KV cache empties (its blocks to the free queue); claims end (new weights next)."""
    count = 0
    for i in range(ints[R_TAIL]):
        slot = run[i, 0]
        if trajs[slot, ROW_ID] == run[i, 1]:
            flush(ints, trajs, slot, ints[STEP])
            trajs[slot, ROW_ID] = -1
            emit(trajs, out, count, slot)
            count += 1
    for i in range(ints[Q_HEAD], ints[Q_TAIL]):
        emit(trajs, out, count, queue[i])
        count += 1
    ints[ABORTED] += count
    ints[FREED] += blocks_at(ints, padding, ints[STEP])
    ints[ROWS] = ints[R_TAIL] = ints[CONTEXT0] = ints[STALE] = ints[ENTRIES] = ints[B_ROWS] = ints[
        B_OFFSETS
    ] = 0
    padding[:] = 0
    ends[:, COUNT] = 0
    spans[:] = 0
    _free_all(ints, nodes)
    ints[Q_TAIL] = ints[Q_HEAD]
    return count


@njit(cache=True)
def _free_all(ints, nodes):
    for node in range(nodes.shape[0]):
        nodes[node, NEXT] = node + 1
    nodes[-1, NEXT] = -1
    ints[FREE_NODE] = 0
