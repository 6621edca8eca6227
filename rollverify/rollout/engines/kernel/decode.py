"""Decoding: the rows' finish steps, one bucket per step (entered at admission, dropped for
rows that left), and a jump of several decode steps at once, priced in closed form, that
hands out the rows finishing inside it."""

from __future__ import annotations

from numba import njit

from rollverify.rollout.engines.kernel.arrays import (
    BLOCK,
    CLOCK,
    CONTEXT0,
    COUNT,
    DECODE_STEPS,
    ENTRIES,
    FIRST,
    FREE_NODE,
    FREED,
    LAST,
    NEXT,
    NODE_ROW,
    NODE_SLOT,
    ROW_ID,
    ROWS,
    SLOT_STEPS_BUSY,
    SPAN,
    STEP,
)
from rollverify.rollout.engines.kernel.kv_blocks import blocks_for, count_row
from rollverify.rollout.engines.kernel.prices import decode_run
from rollverify.rollout.engines.kernel.rows import finished_out, flush, leave


@njit(cache=True)
def decode(
    ints, floats, trajs, ends, spans, nodes, padding, pads, prices, steps, members, out, count
):
    rows = ints[ROWS]
    context = ints[CONTEXT0] + rows * (ints[STEP] + 1)
    floats[CLOCK] += decode_run(prices, rows, context, steps)
    ints[STEP] += steps
    ints[DECODE_STEPS] += steps
    ints[SLOT_STEPS_BUSY] += rows * steps
    step = ints[STEP]
    end = step - steps
    while end < step:  # the entries ending in the jump, in order
        end += 1
        bucket = end & (ends.shape[0] - 1)
        if bucket % SPAN == 0 and spans[bucket // SPAN] == 0:
            end += SPAN - 1  # an empty span: no row ends at its steps
            continue
        node = ends[bucket, FIRST]
        for _ in range(ends[bucket, COUNT]):
            row_id, slot, following = (
                nodes[node, NODE_ROW],
                nodes[node, NODE_SLOT],
                nodes[node, NEXT],
            )
            nodes[node, NEXT], ints[FREE_NODE] = ints[FREE_NODE], node
            node = following
            if trajs[slot, ROW_ID] != row_id:
                continue  # preempted: it finishes under a new id
            offset = leave(ints, trajs, slot)
            count_row(ints, padding, pads, offset, -1)
            ints[FREED] += blocks_for(offset + step, ints[BLOCK])
            ints[SLOT_STEPS_BUSY] -= step - end  # it generated no tokens past its end
            flush(ints, trajs, slot, end)
            finished_out(ints, trajs, members, out, count, slot)
            count += 1
        ints[ENTRIES] -= ends[bucket, COUNT]
        spans[bucket // SPAN] -= ends[bucket, COUNT]
        ends[bucket, COUNT] = 0
    return count


@njit(cache=True)
def enter_finish(ints, ends, spans, nodes, end, row_id, slot):
    """A row's finish step, after the entries already there (bisect.insort in the reference:
    their row ids are lower)."""
    node = ints[FREE_NODE]
    ints[FREE_NODE] = nodes[node, NEXT]
    nodes[node, NODE_ROW], nodes[node, NODE_SLOT], nodes[node, NEXT] = row_id, slot, -1
    bucket = end & (ends.shape[0] - 1)
    if ends[bucket, COUNT]:
        nodes[ends[bucket, LAST], NEXT] = node
    else:
        ends[bucket, FIRST] = node
    ends[bucket, LAST] = node
    ends[bucket, COUNT] += 1
    spans[bucket // SPAN] += 1
    ints[ENTRIES] += 1


@njit(cache=True)
def drop_left(ints, trajs, ends, spans, nodes):
    """Entries of rows that left, out of every bucket (the reference's filter of _finishing)."""
    for bucket in range(ends.shape[0]):
        if spans[bucket // SPAN] == 0:
            continue
        node, kept = ends[bucket, FIRST], 0
        for _ in range(ends[bucket, COUNT]):
            following = nodes[node, NEXT]
            if trajs[nodes[node, NODE_SLOT], ROW_ID] == nodes[node, NODE_ROW]:
                if kept:
                    nodes[ends[bucket, LAST], NEXT] = node
                else:
                    ends[bucket, FIRST] = node
                ends[bucket, LAST] = node
                kept += 1
            else:
                nodes[node, NEXT], ints[FREE_NODE] = ints[FREE_NODE], node
            node = following
        ints[ENTRIES] -= ends[bucket, COUNT] - kept
        spans[bucket // SPAN] -= ends[bucket, COUNT] - kept
        ends[bucket, COUNT] = kept
