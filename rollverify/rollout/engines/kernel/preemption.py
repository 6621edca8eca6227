"""Preemption, as vLLM's scheduler does when memory runs out (recompute): the newest rows leave
until the next step's blocks fit, back to the queue's front with their tokens, their prefix
claimed in the prefix cache."""

from __future__ import annotations

from numba import njit

from rollverify.rollout.engines.kernel.arrays import (
    BLOCK,
    CLAIM_BLOCKS,
    CLAIM_FIRST,
    CLAIM_FULL,
    CLAIMED,
    FREED,
    KV_BLOCKS,
    PREEMPTIONS,
    Q_HEAD,
    R_TAIL,
    ROW_ID,
    ROWS,
    STALE,
    STEP,
)
from rollverify.rollout.engines.kernel.decode import drop_left
from rollverify.rollout.engines.kernel.kv_blocks import blocks_at, blocks_for, count_row
from rollverify.rollout.engines.kernel.rows import flush, leave


@njit(cache=True)
def preempt(ints, trajs, queue, run, ends, spans, nodes, padding, pads, at):
    """Preempt the newest rows until step `at` fits; False if it already does."""
    preempted = 0
    while blocks_at(ints, padding, at) > ints[KV_BLOCKS]:
        if ints[ROWS] == 1:
            raise ValueError(
                "vllm: one sequence needs more KV cache than the engines have; raise "
                "vllm.gpu_memory_utilization or vllm.tensor_parallel_size, or lower the context"
            )
        while trajs[run[ints[R_TAIL] - 1, 0], ROW_ID] != run[ints[R_TAIL] - 1, 1]:
            ints[R_TAIL] -= 1  # rows that left
        ints[R_TAIL] -= 1
        slot = run[ints[R_TAIL], 0]
        offset = leave(ints, trajs, slot)
        count_row(ints, padding, pads, offset, -1)
        flush(ints, trajs, slot, ints[STEP])
        tokens = offset + ints[STEP]  # PrefixCache.keep: its prefix stays cached
        trajs[slot, CLAIMED] = 1
        trajs[slot, CLAIM_FIRST] = ints[FREED]
        trajs[slot, CLAIM_BLOCKS] = blocks_for(tokens, ints[BLOCK])
        trajs[slot, CLAIM_FULL] = tokens // ints[BLOCK]
        ints[FREED] += trajs[slot, CLAIM_BLOCKS]
        ints[PREEMPTIONS] += 1
        ints[Q_HEAD] -= 1  # to the queue's front: the last preempted (the oldest) first
        queue[ints[Q_HEAD]] = slot
        preempted += 1
    if not preempted:
        return False
    ints[STALE] += preempted  # their entries in `ends`, dropped when they come up
    if ints[STALE] > ints[ROWS]:  # or now, once they outnumber the live ones
        drop_left(ints, trajs, ends, spans, nodes)
        ints[STALE] = 0
    return True
