"""The kernel's state: numpy arrays (a cached compile takes no classes), and the names that index
them.

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
  labels taken back, a binary heap;
- `prices`: the prices' terms (prices.py).
"""

from __future__ import annotations

import numpy as np

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
