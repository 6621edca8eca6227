"""The KV cache's blocks: those the running rows hold (kv_cache.BlockCount: a row of offset c
holds ceil((c + t) / block) blocks at step t, counted for all rows at once through the
padding residues), and the prefixes preempted rows left cached (kv_cache.PrefixCache: runs of
freed block labels, taken back by a returning row until the free queue reaches them)."""

from __future__ import annotations

from numba import njit

from rollverify.rollout.engines.kernel.arrays import (
    B_OFFSETS,
    B_ROWS,
    BLOCK,
    CACHE_BLOCKS,
    CLAIM_BLOCKS,
    CLAIM_FIRST,
    CLAIM_FULL,
    CLAIMED,
    FREED,
    H_SIZE,
    PASSED,
    TAKEN_BACK,
)


@njit(cache=True)
def blocks_for(tokens, size):
    return -(-tokens // size)


@njit(cache=True)
def blocks_at(ints, padding, step):
    size = ints[BLOCK]
    return (ints[B_OFFSETS] + ints[B_ROWS] * step + padding[step % size]) // size


@njit(cache=True)
def count_row(ints, padding, pads, offset, sign):
    ints[B_ROWS] += sign
    ints[B_OFFSETS] += sign * offset
    residue = pads[offset % ints[BLOCK]]
    for s in range(ints[BLOCK]):
        padding[s] += sign * residue[s]


@njit(cache=True)
def first_step_over(ints, padding, first, last, blocks):
    if blocks_at(ints, padding, last) <= blocks:
        return -1
    if blocks_at(ints, padding, first) > blocks:
        return first
    low, high = first, last
    while low < high:
        middle = (low + high) // 2
        if blocks_at(ints, padding, middle) > blocks:
            high = middle
        else:
            low = middle + 1
    return low


@njit(cache=True)
def _heap_less(heap, i, j):
    return heap[i, 0] < heap[j, 0] or (heap[i, 0] == heap[j, 0] and heap[i, 1] < heap[j, 1])


@njit(cache=True)
def _heap_push(ints, heap, start, end):
    i = ints[H_SIZE]
    ints[H_SIZE] += 1
    heap[i, 0], heap[i, 1] = start, end
    while i > 0:
        parent = (i - 1) // 2
        if not _heap_less(heap, i, parent):
            break
        heap[i, 0], heap[parent, 0] = heap[parent, 0], heap[i, 0]
        heap[i, 1], heap[parent, 1] = heap[parent, 1], heap[i, 1]
        i = parent


@njit(cache=True)
def _heap_pop(ints, heap):
    start, end = heap[0, 0], heap[0, 1]
    ints[H_SIZE] -= 1
    last = ints[H_SIZE]
    heap[0, 0], heap[0, 1] = heap[last, 0], heap[last, 1]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= last:
            break
        if child + 1 < last and _heap_less(heap, child + 1, child):
            child += 1
        if not _heap_less(heap, child, i):
            break
        heap[i, 0], heap[child, 0] = heap[child, 0], heap[i, 0]
        heap[i, 1], heap[child, 1] = heap[child, 1], heap[i, 1]
        i = child
    return start, end


@njit(cache=True)
def _front(ints, heap, held):
    allocated = ints[FREED] - ints[TAKEN_BACK] - (ints[CACHE_BLOCKS] - held)
    while ints[H_SIZE] > 0 and heap[0, 0] < allocated + ints[PASSED]:
        start, end = _heap_pop(ints, heap)
        front = allocated + ints[PASSED]
        if end <= front:
            ints[PASSED] += end - start
        else:  # the front is inside the run: pass its lower part, keep the rest
            ints[PASSED] += front - start
            _heap_push(ints, heap, front, end)
    return allocated + ints[PASSED]


@njit(cache=True)
def prefix_hits(ints, trajs, heap, slot, held):
    """PrefixCache.hits: -1 for None (not preempted since the last reset)."""
    if not trajs[slot, CLAIMED]:
        return -1
    trajs[slot, CLAIMED] = 0
    first, blocks, full = (
        trajs[slot, CLAIM_FIRST],
        trajs[slot, CLAIM_BLOCKS],
        trajs[slot, CLAIM_FULL],
    )
    surviving = min(max(first + blocks - _front(ints, heap, held), 0), blocks)
    found = min(surviving, full)
    if found:
        ints[TAKEN_BACK] += found
        _heap_push(ints, heap, first + blocks - found, first + blocks)
    return found
