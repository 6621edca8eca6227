"""Admission, as vLLM admits: queued trajectories into free slots in batches (or at once when
nothing runs), first come first served while their blocks fit, one prefill for all of them;
a preempted row's prefix still cached is not computed again."""

from __future__ import annotations

from numba import njit

from rollverify.rollout.engines.kernel.arrays import (
    ADMIT_BATCH,
    ADMITTED_AT,
    BASE,
    BLOCK,
    CLOCK,
    CONTEXT0,
    DRAWN,
    FINAL,
    FREED,
    GROUP,
    IN,
    KV_BLOCKS,
    LENGTH,
    MAX_NEW,
    NO_LIMIT,
    PREFILL_SECONDS,
    PREFILLED,
    Q_HEAD,
    Q_TAIL,
    R_TAIL,
    RECOMPUTED,
    ROW_ID,
    ROWS,
    SERIAL,
    SLOTS,
    STEP,
)
from rollverify.rollout.engines.kernel.decode import enter_finish
from rollverify.rollout.engines.kernel.kv_blocks import (
    blocks_at,
    blocks_for,
    count_row,
    prefix_hits,
)
from rollverify.rollout.engines.kernel.prices import prefill
from rollverify.rollout.engines.kernel.rows import context_of, finished_out, flush


@njit(cache=True)
def admissible(ints, free):
    waiting = ints[Q_TAIL] - ints[Q_HEAD]
    return min(free, waiting) >= min(ints[ADMIT_BATCH], waiting) or ints[ROWS] == 0


@njit(cache=True)
def head_fits(ints, trajs, queue, padding):
    if ints[KV_BLOCKS] == NO_LIMIT:
        return True
    need = blocks_for(context_of(trajs, queue[ints[Q_HEAD]]), ints[BLOCK])
    return blocks_at(ints, padding, ints[STEP] + 1) + need <= ints[KV_BLOCKS]


@njit(cache=True)
def admit(state, members, out, count, admitted):
    """Queued rows into free slots as vLLM admits them (one prefill for all); those done at
    their prefill go to out[count:]; returns the new count. `state`: run_polls's arrays."""
    ints, floats, trajs, queue, run, ends, spans, nodes, padding, pads, heap, prices = state
    free = ints[SLOTS] - ints[ROWS]
    if ints[Q_TAIL] == ints[Q_HEAD] or not admissible(ints, free):
        return count
    most = min(free, ints[Q_TAIL] - ints[Q_HEAD])
    size, taken = ints[BLOCK], 0
    tokens = attended = 0
    held = blocks_at(ints, padding, ints[STEP])
    while ints[Q_TAIL] > ints[Q_HEAD] and taken < most:  # _fitting
        slot = queue[ints[Q_HEAD]]
        context = context_of(trajs, slot)
        if ints[KV_BLOCKS] != NO_LIMIT:
            fits = held + blocks_for(context, size) <= ints[KV_BLOCKS]
            if not fits and (taken or ints[ROWS]):
                break
        ints[Q_HEAD] += 1
        found = 0
        if ints[KV_BLOCKS] != NO_LIMIT:
            hits = prefix_hits(ints, trajs, heap, slot, held)
            held += blocks_for(context, size)
            if hits != -1:
                found = min(hits * size, context - 1)  # the last is computed
                ints[RECOMPUTED] += context - found
        admitted[taken, 0], admitted[taken, 1] = slot, context
        tokens += context - found
        attended += context * (context + 1) // 2 - found * (found + 1) // 2
        taken += 1
    if not taken:
        return count
    price = prefill(prices, tokens, attended)
    floats[CLOCK] += price
    floats[PREFILL_SECONDS] += price
    step = ints[STEP]
    for i in range(taken):
        slot, context = admitted[i, 0], admitted[i, 1]
        length = trajs[slot, LENGTH]
        final = max(min(trajs[slot, DRAWN], ints[MAX_NEW]), length + 1)
        trajs[slot, ADMITTED_AT], trajs[slot, BASE], trajs[slot, FINAL] = step, context, final
        end = step + final - length - 1  # the prefill made one token
        if end <= step:  # done at its prefill: its blocks go straight back
            ints[FREED] += blocks_for(context, size)
            flush(ints, trajs, slot, step)
            finished_out(ints, trajs, members, out, count, slot)
            count += 1
            continue
        row_id = ints[SERIAL]
        ints[SERIAL] += 1
        trajs[slot, ROW_ID] = row_id
        ints[ROWS] += 1
        run[ints[R_TAIL], 0], run[ints[R_TAIL], 1] = slot, row_id
        ints[R_TAIL] += 1
        offset = context - step
        ints[CONTEXT0] += offset
        count_row(ints, padding, pads, offset, 1)
        enter_finish(ints, ends, spans, nodes, end, row_id, slot)
    ints[PREFILLED] += tokens
    return count


@njit(cache=True)
def submit(ints, trajs, queue, members, first, entering):
    """Trajectories into slots first, first + 1, ... and the queue's end; `entering`: a row
    each, IN's columns."""
    for i in range(entering.shape[0]):
        slot = first + i
        trajs[slot, :] = 0
        for column in range(len(IN)):
            trajs[slot, IN[column]] = entering[i, column]
        trajs[slot, ROW_ID] = -1
        members[trajs[slot, GROUP]] += 1
        queue[ints[Q_TAIL]] = slot
        ints[Q_TAIL] += 1
