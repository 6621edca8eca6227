"""The simulated engine's exact model of a full KV cache, compiled (numba): the events of
SimulatedEngine.poll (engines/simulated.py), line for line, on arrays.

At the paper's scale partial rollout keeps the engines' KV cache at the brim, and vLLM's
scheduler then preempts a row at almost every engine step and readmits it at the next finish:
millions of events in a run, ~30 us each as Python objects, well under one compiled. The
Python engine stays the reference (it also does tool calls, weights loaded in flight and real
trajectories); tests/test_simulated_compiled.py holds this one to it, table for table.

State, all numpy arrays (a cached compile takes no classes):
- `ints`, integers: the engine's counters and positions (the names below index it);
- `floats`, floats: the virtual clock and the prefills' share of it;
- `trajs`, one row per trajectory in the engine (its slot): its tokens and, while it runs, its row;
- `queue[Q_HEAD:Q_TAIL]`: slots waiting, the front first (preempted rows are put before it);
- `run[:R_TAIL]`: (slot, row id) in the order rows were admitted; an entry whose slot holds
  another row id (or none) is a row that left;
- `ends`, `nodes`: the rows' finish steps (the reference's sorted `_finishing`), one bucket per
  step (modulo a power of two above the budget: every finish is within it) holding a list of
  (row id, slot) in `nodes`, in the order entered (row ids rise); rows that left stay until
  they come up, as there;
- `padding`, `pads`: BlockCount's (cost/kv_cache.py); `heap[:H_SIZE]`: PrefixCache's runs of
  labels taken back, a binary heap.
`prices` holds the prices' terms (`price_terms`): the roofline of cost/costmodel/roofline.py,
evaluated in the same order, so the clock is the reference's to the last bit.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

# ints: the engine's integers
(STEP, ROWS, Q_HEAD, Q_TAIL, SERIAL, ENTRIES, FREE_NODE, R_TAIL, STALE, CONTEXT0, B_ROWS,
 B_OFFSETS, FREED, TAKEN_BACK, PASSED, H_SIZE, VERSION, DECODE_STEPS, SLOT_STEPS_BUSY, GENERATED,
 REGENERATED, PREFILLED, PREEMPTIONS, RECOMPUTED, ABORTED, SLOTS, MAX_NEW, KV_BLOCKS, BLOCK,
 ADMIT_BATCH, FINISHES_PER_POLL, CACHE_BLOCKS, WAKE, INTS) = range(34)  # fmt: skip
NO_LIMIT = -1  # KV_BLOCKS of a cache without limit
# floats: the engine's floats
CLOCK, PREFILL_SECONDS, FLOATS = range(3)
# trajs: a trajectory's integers (OLDEST -1: no tokens yet; DRAWN: its length as `lengths` drew it)
(LENGTH, HIGH_WATER, PROMPT, OLDEST, DRAWN, ADMITTED_AT, BASE, FINAL, ROW_ID, CLAIMED,
 CLAIM_FIRST, CLAIM_BLOCKS, CLAIM_FULL, REASON, GROUP, FIELDS) = range(16)  # fmt: skip
STOP, LENGTH_CUT = 1, 2  # REASON (0: not finished)
IN = (LENGTH, HIGH_WATER, PROMPT, OLDEST, DRAWN, GROUP)  # submit's columns (GROUP: an index)
OUT = (-1, LENGTH, HIGH_WATER, OLDEST, REASON, FINAL)  # out's columns: the slot, then these
FIRST, LAST, COUNT = range(3)  # ends: a step's bucket
SPAN = 64  # spans: the entries of each run of SPAN buckets (scans skip empty ones)
NODE_ROW, NODE_SLOT, NEXT = range(3)  # nodes: an entry, and the next in its bucket (or free)
# prices: the prices' terms
(ENGINES, TP, WEIGHT_BYTES, KV_BYTES, ACTIVE, LAYERS, HEADS, HEAD_DIM, HIDDEN, GPU_BANDWIDTH,
 GPU_FLOPS, GPU_LINK, EFF_BANDWIDTH, EFF_FLOPS, EFF_LINK, OVERHEAD, TERMS) = range(17)  # fmt: skip
GROW = -1  # run_polls: an array needs room first


def price_terms(pricing) -> tuple:
    """A Pricing's terms (`prices`). Integers stay integers: the roofline mixes them."""
    shape, gpu, efficiency, layout = pricing.shape, pricing.gpu, pricing.efficiency, pricing.layout
    return (
        layout.engines, layout.tensor_parallel, shape.weight_bytes, shape.kv_bytes_per_token,
        shape.active_parameters, shape.layers, shape.heads, shape.head_dim, shape.hidden,
        float(gpu.bandwidth), float(gpu.peak_flops), float(gpu.link), float(efficiency.bandwidth),
        float(efficiency.forward_flops), float(efficiency.link), float(efficiency.step_overhead),
    )  # fmt: skip


# -- prices (roofline.py, operation for operation) ---------------------------------------------


@njit(cache=True)
def _all_reduce(prices, tokens):
    tp = prices[TP]
    if tp <= 1:
        return 0.0
    data = 2 * prices[LAYERS] * tokens * prices[HIDDEN] * 2
    return data * 2 * (tp - 1) / tp / (prices[GPU_LINK] * prices[EFF_LINK])


@njit(cache=True)
def _line_sum(start, slope, lo, hi):
    if hi <= lo:
        return 0.0
    return (hi - lo) * start + slope * (hi * (hi - 1) - lo * (lo - 1)) / 2


@njit(cache=True)
def decode_run(prices, rows, context, steps):
    """Pricing.decode_run: `steps` decode iterations of `rows` rows, contexts summing to
    `context` at the first (decode_run_seconds on each engine's share)."""
    share, context_share = rows / prices[ENGINES], context / prices[ENGINES]
    if share <= 0 or steps <= 0:
        return 0.0
    tp = prices[TP]
    bandwidth = tp * prices[GPU_BANDWIDTH] * prices[EFF_BANDWIDTH]
    flops = tp * prices[GPU_FLOPS] * prices[EFF_FLOPS]
    attention = 4 * prices[LAYERS] * prices[HEADS] * prices[HEAD_DIM]
    m0 = (prices[WEIGHT_BYTES] + context_share * prices[KV_BYTES]) / bandwidth
    m1 = share * prices[KV_BYTES] / bandwidth
    c0 = (2 * prices[ACTIVE] * share + attention * context_share) / flops
    c1 = attention * share / flops
    fixed = prices[OVERHEAD] + _all_reduce(prices, share)
    if c0 > m0:
        first0, first1, second0, second1 = c0, c1, m0, m1
    else:
        first0, first1, second0, second1 = m0, m1, c0, c1
    cross = steps
    if second1 > first1:
        ceiling = math.ceil((first0 - second0) / (second1 - first1))
        if ceiling < steps:
            cross = int(ceiling)
    return (
        _line_sum(first0, first1, 0, cross) + _line_sum(second0, second1, cross, steps)
        + steps * fixed
    )  # fmt: skip


@njit(cache=True)
def prefill(prices, tokens, attended):
    """Pricing.iteration of an admission: EngineStep(0, 0, rows, tokens, attended) on each
    engine's share (engine_step_seconds)."""
    engines = prices[ENGINES]
    decode_rows, decode_context = 0 / engines, 0 / engines
    new, attending = tokens / engines, attended / engines
    total = decode_rows + new
    if total <= 0:
        return 0.0
    tp = prices[TP]
    kv = (decode_context + new) * prices[KV_BYTES]
    memory = (prices[WEIGHT_BYTES] + kv) / tp / (prices[GPU_BANDWIDTH] * prices[EFF_BANDWIDTH])
    attended_all = decode_context + attending
    flops = 2 * prices[ACTIVE] * total + 4 * prices[LAYERS] * prices[HEADS] * (
        prices[HEAD_DIM] * attended_all
    )
    compute = flops / tp
    compute /= prices[GPU_FLOPS] * prices[EFF_FLOPS]
    overhead = prices[OVERHEAD] + _all_reduce(prices, total)
    return max(memory, compute) + overhead


# -- blocks (kv_cache.BlockCount and PrefixCache) ----------------------------------------------


@njit(cache=True)
def _blocks_for(tokens, size):
    return -(-tokens // size)


@njit(cache=True)
def _blocks_at(ints, padding, step):
    size = ints[BLOCK]
    return (ints[B_OFFSETS] + ints[B_ROWS] * step + padding[step % size]) // size


@njit(cache=True)
def _count(ints, padding, pads, offset, sign):
    ints[B_ROWS] += sign
    ints[B_OFFSETS] += sign * offset
    residue = pads[offset % ints[BLOCK]]
    for s in range(ints[BLOCK]):
        padding[s] += sign * residue[s]


@njit(cache=True)
def _first_step_over(ints, padding, first, last, blocks):
    if _blocks_at(ints, padding, last) <= blocks:
        return -1
    if _blocks_at(ints, padding, first) > blocks:
        return first
    low, high = first, last
    while low < high:
        middle = (low + high) // 2
        if _blocks_at(ints, padding, middle) > blocks:
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
def _hits(ints, trajs, heap, slot, held):
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


# -- rows ---------------------------------------------------------------------------------------


@njit(cache=True)
def _move(table, source, target):
    """One row of a small table to another (scalar copies: a row slice costs more)."""
    for column in range(table.shape[1]):
        table[target, column] = table[source, column]


@njit(cache=True)
def _context(trajs, slot):
    return trajs[slot, PROMPT] + trajs[slot, LENGTH]


@njit(cache=True)
def _flush(ints, trajs, slot, at):
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
def _emit(trajs, out, at, slot):
    """A trajectory leaving the engine, into row `at` of `out`: its slot and what it carries
    back (OUT)."""
    out[at, 0] = slot
    for column in range(1, len(OUT)):
        out[at, column] = trajs[slot, OUT[column]]


@njit(cache=True)
def _finished(ints, trajs, members, out, at, slot):
    """A finished trajectory out; WAKE if it was its group's last in the engine (the group
    may be complete: a schedule acts on that)."""
    _emit(trajs, out, at, slot)
    members[trajs[slot, GROUP]] -= 1
    if members[trajs[slot, GROUP]] == 0:
        ints[WAKE] = 1


@njit(cache=True)
def _leave(ints, trajs, slot):
    """The row stops running; returns its offset (base - admitted at)."""
    offset = trajs[slot, BASE] - trajs[slot, ADMITTED_AT]
    trajs[slot, ROW_ID] = -1
    ints[ROWS] -= 1
    ints[CONTEXT0] -= offset
    return offset


@njit(cache=True)
def _decode(
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
            offset = _leave(ints, trajs, slot)
            _count(ints, padding, pads, offset, -1)
            ints[FREED] += _blocks_for(offset + step, ints[BLOCK])
            ints[SLOT_STEPS_BUSY] -= step - end  # it generated no tokens past its end
            _flush(ints, trajs, slot, end)
            _finished(ints, trajs, members, out, count, slot)
            count += 1
        ints[ENTRIES] -= ends[bucket, COUNT]
        spans[bucket // SPAN] -= ends[bucket, COUNT]
        ends[bucket, COUNT] = 0
    return count


@njit(cache=True)
def _enter(ints, ends, spans, nodes, end, row_id, slot):
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
def _drop_left(ints, trajs, ends, spans, nodes):
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


@njit(cache=True)
def _admissible(ints, free):
    waiting = ints[Q_TAIL] - ints[Q_HEAD]
    return min(free, waiting) >= min(ints[ADMIT_BATCH], waiting) or ints[ROWS] == 0


@njit(cache=True)
def _head_fits(ints, trajs, queue, padding):
    if ints[KV_BLOCKS] == NO_LIMIT:
        return True
    need = _blocks_for(_context(trajs, queue[ints[Q_HEAD]]), ints[BLOCK])
    return _blocks_at(ints, padding, ints[STEP] + 1) + need <= ints[KV_BLOCKS]


@njit(cache=True)
def _steps_to_next_event(ints, trajs, queue, ends, spans, padding):
    waiting = ints[Q_TAIL] > ints[Q_HEAD]
    if (
        waiting
        and _admissible(ints, ints[SLOTS] - ints[ROWS])
        and _head_fits(ints, trajs, queue, padding)
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
def _preempt(ints, trajs, queue, run, ends, spans, nodes, padding, pads, at):
    """Preempt the newest rows until step `at` fits; False if it already does."""
    preempted = 0
    while _blocks_at(ints, padding, at) > ints[KV_BLOCKS]:
        if ints[ROWS] == 1:
            raise ValueError(
                "vllm: one sequence needs more KV cache than the engines have; raise "
                "vllm.gpu_memory_utilization or vllm.tensor_parallel_size, or lower the context"
            )
        while trajs[run[ints[R_TAIL] - 1, 0], ROW_ID] != run[ints[R_TAIL] - 1, 1]:
            ints[R_TAIL] -= 1  # rows that left
        ints[R_TAIL] -= 1
        slot = run[ints[R_TAIL], 0]
        offset = _leave(ints, trajs, slot)
        _count(ints, padding, pads, offset, -1)
        _flush(ints, trajs, slot, ints[STEP])
        tokens = offset + ints[STEP]  # PrefixCache.keep: its prefix stays cached
        trajs[slot, CLAIMED] = 1
        trajs[slot, CLAIM_FIRST] = ints[FREED]
        trajs[slot, CLAIM_BLOCKS] = _blocks_for(tokens, ints[BLOCK])
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
        _drop_left(ints, trajs, ends, spans, nodes)
        ints[STALE] = 0
    return True


@njit(cache=True)
def _admit(state, members, out, count, admitted):
    """Queued rows into free slots as vLLM admits them (one prefill for all); those done at
    their prefill go to out[count:]; returns the new count. `state`: run_polls's arrays."""
    ints, floats, trajs, queue, run, ends, spans, nodes, padding, pads, heap, prices = state
    free = ints[SLOTS] - ints[ROWS]
    if ints[Q_TAIL] == ints[Q_HEAD] or not _admissible(ints, free):
        return count
    most = min(free, ints[Q_TAIL] - ints[Q_HEAD])
    size, taken = ints[BLOCK], 0
    tokens = attended = 0
    held = _blocks_at(ints, padding, ints[STEP])
    while ints[Q_TAIL] > ints[Q_HEAD] and taken < most:  # _fitting
        slot = queue[ints[Q_HEAD]]
        context = _context(trajs, slot)
        if ints[KV_BLOCKS] != NO_LIMIT:
            fits = held + _blocks_for(context, size) <= ints[KV_BLOCKS]
            if not fits and (taken or ints[ROWS]):
                break
        ints[Q_HEAD] += 1
        found = 0
        if ints[KV_BLOCKS] != NO_LIMIT:
            hits = _hits(ints, trajs, heap, slot, held)
            held += _blocks_for(context, size)
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
            ints[FREED] += _blocks_for(context, size)
            _flush(ints, trajs, slot, step)
            _finished(ints, trajs, members, out, count, slot)
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
        _count(ints, padding, pads, offset, 1)
        _enter(ints, ends, spans, nodes, end, row_id, slot)
    ints[PREFILLED] += tokens
    return count


@njit(cache=True)
def _poll(state, members, out, count, admitted):
    """SimulatedEngine.poll without tool calls or weights in flight: the trajectories that
    finish go to out[count:]; returns the new count. `state`: run_polls's arrays."""
    ints, floats, trajs, queue, run, ends, spans, nodes, padding, pads, heap, prices = state
    if ints[ROWS]:
        steps = _steps_to_next_event(ints, trajs, queue, ends, spans, padding)
        full = -1
        if ints[KV_BLOCKS] != NO_LIMIT:
            full = _first_step_over(
                ints, padding, ints[STEP] + 1, ints[STEP] + steps, ints[KV_BLOCKS]
            )
        if full != -1:
            if full > ints[STEP] + 1:
                jump = full - ints[STEP] - 1
                count = _decode(
                    ints, floats, trajs, ends, spans, nodes, padding, pads, prices, jump, members,
                    out, count,
                )  # fmt: skip
            if _preempt(ints, trajs, queue, run, ends, spans, nodes, padding, pads, full):
                return count  # vLLM admits nothing in a step that preempted
            return _admit(state, members, out, count, admitted)
        count = _decode(
            ints, floats, trajs, ends, spans, nodes, padding, pads, prices, steps, members, out,
            count,
        )  # fmt: skip
    return _admit(state, members, out, count, admitted)


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


@njit(cache=True)
def pause(ints, trajs, queue, run, ends, spans, nodes, padding, out):
    """Everything running (flushed, in the order admitted) then queued, into out; returns the
    count. The KV cache empties (its blocks to the free queue); claims end (new weights next)."""
    count = 0
    for i in range(ints[R_TAIL]):
        slot = run[i, 0]
        if trajs[slot, ROW_ID] == run[i, 1]:
            _flush(ints, trajs, slot, ints[STEP])
            trajs[slot, ROW_ID] = -1
            _emit(trajs, out, count, slot)
            count += 1
    for i in range(ints[Q_HEAD], ints[Q_TAIL]):
        _emit(trajs, out, count, queue[i])
        count += 1
    ints[ABORTED] += count
    ints[FREED] += _blocks_at(ints, padding, ints[STEP])
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


def more_nodes(ints: np.ndarray, nodes: np.ndarray, count: int) -> np.ndarray:
    """`nodes` with `count` more, free."""
    grown = np.zeros((nodes.shape[0] + count, nodes.shape[1]), dtype=nodes.dtype)
    grown[: nodes.shape[0]] = nodes
    grown[nodes.shape[0] :, NEXT] = np.arange(nodes.shape[0] + 1, grown.shape[0] + 1)
    grown[-1, NEXT] = ints[FREE_NODE]
    ints[FREE_NODE] = nodes.shape[0]
    return grown


def empty_state(slots: int, block_size: int, max_new_tokens: int) -> dict[str, np.ndarray]:
    """The arrays of an engine with nothing in it, sized for `slots` rows and responses of up
    to `max_new_tokens` (every finish is within that many steps)."""
    buckets = max(SPAN, 1 << max_new_tokens.bit_length())  # a power of two, above the budget
    nodes = np.zeros((4 * slots + 64, 3), dtype=np.int64)
    nodes[:, NEXT] = np.arange(1, nodes.shape[0] + 1)
    nodes[-1, NEXT] = -1
    pads = np.array(
        [[-(r + s) % block_size for s in range(block_size)] for r in range(block_size)],
        dtype=np.int64,
    )
    return {
        "ints": np.zeros(INTS, dtype=np.int64),
        "floats": np.zeros(FLOATS, dtype=np.float64),
        "trajs": np.zeros((4 * slots + 64, FIELDS), dtype=np.int64),
        "queue": np.zeros(8 * slots + 64, dtype=np.int64),
        "run": np.zeros((4 * slots + 64, 2), dtype=np.int64),
        "ends": np.zeros((buckets, 3), dtype=np.int64),
        "spans": np.zeros(max(1, buckets // SPAN), dtype=np.int64),
        "nodes": nodes,
        "padding": np.zeros(block_size, dtype=np.int64),
        "pads": pads,
        "heap": np.zeros((4 * slots + 64, 2), dtype=np.int64),
        "out": np.zeros((2 * slots + 64, len(OUT)), dtype=np.int64),
        "admitted": np.zeros((slots + 1, 2), dtype=np.int64),
        "members": np.zeros(slots + 64, dtype=np.int64),
    }
