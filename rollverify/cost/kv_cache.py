"""KV-cache capacity and the blocks a batch holds, as vLLM (V1) counts them.

Capacity (vllm/v1/worker/gpu_worker.py, determine_available_memory): an engine may use
`gpu_memory_utilization` of each GPU; what its weights and the peak of a profiling forward pass
leave is cut into blocks of `block_size` tokens. The profiling pass runs
`max_num_batched_tokens` tokens through the model and the sampler over `max_num_seqs` rows; its
peak is estimated here (no GPU is touched):
- one layer's activations at the widest point, the MLP: gate and up projections (2 x
  intermediate), their product (intermediate) and the residual stream (hidden), bf16;
- the sampler's logits over max_num_seqs rows, fp32, and one fp32 copy (probabilities).
Left out: CUDA graphs, the CUDA context and NCCL buffers (vLLM measures those as non-torch
memory; a few GiB at most on an 80 GB GPU).

Blocks: a request with n tokens in its KV holds ceil(n / block_size) blocks. For rows whose
context grows by one token per step, `BlockCount` gives the blocks held at any future step in
O(block_size) and the first step at which they exceed a capacity in O(block_size log steps),
so the simulated engine can jump from event to event."""

from __future__ import annotations

import heapq
import operator
from collections import Counter
from dataclasses import dataclass

from rollverify.config.model_shape import ModelShape
from rollverify.infra.vllm_versions import default_block_size

BF16, FP32 = 2, 4
# AsyncLLM's usage context (ENGINE_CONTEXT) has no entry in vLLM's per-GPU defaults, so the
# scheduler's own default applies: vllm/config/scheduler.py DEFAULT_MAX_NUM_BATCHED_TOKENS.
MAX_NUM_BATCHED_TOKENS = 2048


@dataclass(frozen=True)
class KVCapacity:
    """What one engine's memory holds, in bytes per GPU of the engine, and its KV tokens."""

    usable: float  # gpu_memory_utilization x the GPU's memory
    weights: float
    activations: float  # the profiling pass's peak
    kv_bytes_per_token: float  # per GPU of the engine (split by tensor parallelism)
    block_size: int

    @property
    def blocks(self) -> int:
        free = self.usable - self.weights - self.activations
        return max(int(free // (self.kv_bytes_per_token * self.block_size)), 0)

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size


def capacity(
    shape: ModelShape,
    gpu_memory: float,
    gpu_memory_utilization: float,
    tensor_parallel: int = 1,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int | None = None,
    block_size: int | None = None,
    dtype_bytes: int = BF16,
) -> KVCapacity:
    """One engine's KV cache (see the module docstring); None takes vLLM's default.
    `dtype_bytes`: of the weights, the activations and the KV cache (model.dtype)."""
    tokens = max_num_batched_tokens or MAX_NUM_BATCHED_TOKENS
    intermediate = shape.intermediate or 4 * shape.hidden
    layer = tokens * (3 * intermediate + shape.hidden) * dtype_bytes / tensor_parallel
    sampler = 2 * FP32 * max_num_seqs * shape.vocab
    return KVCapacity(
        usable=gpu_memory_utilization * gpu_memory,
        weights=shape.parameters * dtype_bytes / tensor_parallel,
        activations=layer + sampler,
        kv_bytes_per_token=shape.kv_bytes_per_token * dtype_bytes / BF16 / tensor_parallel,
        block_size=block_size or default_block_size(),
    )


class BlockCount:
    """Rows whose KV grows by one token per engine step: row i holds c_i + t tokens at step t
    (c_i is its offset: tokens at admission minus the step it was admitted at)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.rows = 0
        self.offsets = 0  # sum of c_i
        # padding[s]: the rows' last-block padding at a step = s mod block_size, kept as rows
        # come and go, so that blocks_at (asked at every event) is O(1)
        self.padding = [0] * block_size
        self._pads = [[-(r + s) % block_size for s in range(block_size)] for r in range(block_size)]

    def add(self, offset: int) -> None:
        self.rows += 1
        self.offsets += offset
        # (map over operator.add: twice as fast as a comprehension, and this runs at every
        # admission)
        self.padding = list(map(operator.add, self.padding, self._pads[offset % self.block_size]))

    def add_many(self, offsets: list[int], sign: int = 1) -> None:
        """add (or with sign -1, remove) each of `offsets`: one pass over the padding per
        residue, not per row (an admission or a jump's finishes move hundreds at paper scale)."""
        if len(offsets) < 4:
            for offset in offsets:
                (self.add if sign > 0 else self.remove)(offset)
            return
        self.rows += sign * len(offsets)
        self.offsets += sign * sum(offsets)
        padding = self.padding
        for residue, count in Counter(o % self.block_size for o in offsets).items():
            step = sign * count
            padding = [p + step * d for p, d in zip(padding, self._pads[residue], strict=True)]
        self.padding = padding

    def remove(self, offset: int) -> None:
        self.rows -= 1
        self.offsets -= offset
        self.padding = list(map(operator.sub, self.padding, self._pads[offset % self.block_size]))

    def clear(self) -> None:
        self.rows, self.offsets = 0, 0
        self.padding = [0] * self.block_size

    def blocks_at(self, step: int) -> int:
        """sum_i ceil((c_i + step) / block_size): each row's tokens plus the padding of its
        last block, which depends only on c_i mod block_size."""
        padding = self.padding[step % self.block_size]
        return (self.offsets + self.rows * step + padding) // self.block_size

    def first_step_over(self, first: int, last: int, blocks: int) -> int | None:
        """The first step in [first, last] at which the rows hold more than `blocks`, or None.
        Blocks held only grow with the step, so a bisection finds it."""
        if self.blocks_at(last) <= blocks:
            return None
        if self.blocks_at(first) > blocks:  # a full cache's usual answer: no bisection
            return first
        low, high = first, last  # blocks_at(high) > blocks
        while low < high:
            middle = (low + high) // 2
            if self.blocks_at(middle) > blocks:
                high = middle
            else:
                low = middle + 1
        return low


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class PrefixCache:
    """Which blocks of preempted rows are still cached when they return (vLLM's prefix caching,
    on in our sidecars), so that only the rest is recomputed.

    vLLM keeps freed blocks in a queue and allocates from its front, evicting what they cached;
    a request's blocks are freed last block first, so its prefix is evicted last
    (vllm/v1/core/block_pool.py). Here every freed block gets the next label of that queue. The
    queue's front is past the labels allocation took (those freed, less those still free and
    those a cache hit took back from the middle) and past the taken-back labels below it. A
    returning row keeps the prefix blocks whose labels the front has not reached (only full
    blocks are cached). New weights make every cached block stale: `reset`."""

    def __init__(self, blocks: int) -> None:
        self.blocks = blocks  # the cache's size: labels 0 .. blocks - 1 are free at start
        self.freed = blocks  # labels given so far
        self.taken_back = 0  # blocks cache hits took out of the queue
        self._taken: list[tuple[int, int]] = []  # heap of [start, end) label runs taken back
        self._passed = 0  # taken-back labels the front has passed
        self._claims: dict[int, tuple[int, int, int]] = {}  # key -> (first label, blocks, full)

    def free(self, blocks: int) -> None:
        self.freed += blocks

    def keep(self, key: int, tokens: int, block_size: int) -> None:
        """A preempted row of `tokens` tokens frees its blocks, its prefix cached."""
        blocks = blocks_for(tokens, block_size)
        self._claims[key] = (self.freed, blocks, tokens // block_size)
        self.freed += blocks

    def front(self, held: int) -> int:
        """The label at the front of the free queue when `held` blocks are in use."""
        allocated = self.freed - self.taken_back - (self.blocks - held)
        while self._taken and self._taken[0][0] < allocated + self._passed:
            start, end = heapq.heappop(self._taken)
            front = allocated + self._passed
            if end <= front:
                self._passed += end - start
            else:  # the front is inside the run: pass its lower part, keep the rest
                self._passed += front - start
                heapq.heappush(self._taken, (front, end))
        return allocated + self._passed

    def hits(self, key: int, held: int) -> int | None:
        """Full blocks of `key`'s prefix still cached as it returns (taken back), or None if it
        was not preempted since the last reset. `held`: blocks in use now."""
        claim = self._claims.pop(key, None)
        if claim is None:
            return None
        first, blocks, full = claim
        surviving = min(max(first + blocks - self.front(held), 0), blocks)  # the prefix's
        found = min(surviving, full)
        if found:
            self.taken_back += found
            heapq.heappush(self._taken, (first + blocks - found, first + blocks))
        return found

    def reset(self) -> None:
        self._claims.clear()
