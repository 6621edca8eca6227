"""The running rows and the KV cache they hold, on the simulated engine (engines/simulated.py),
as vLLM's V1 scheduler has it: rows hold blocks of `block_size` tokens (BlockCount,
rollverify/cost/kv_cache.py); at a step whose blocks would exceed the cache, the newest rows
are preempted (recompute: their KV is dropped, they return to the queue's front with the
tokens they made); a queued trajectory is admitted only if its blocks fit, first come first
served; a preempted row's prefix stays cached (PrefixCache) until the free queue reaches its
blocks, and is not computed again if it returns before."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from rollverify.cost.kv_cache import BlockCount, PrefixCache, blocks_for
from rollverify.rollout.engines.protocol import EngineStats
from rollverify.rollout.trajectory import Trajectory


@dataclass
class Row:
    trajectory: Trajectory
    admitted_at: int  # engine step of the prefill (its first token)
    base: int  # context at admission: prompt + tokens the trajectory had
    target: int  # generated tokens when it leaves the engine: at its end, or at a tool call
    final: int  # generated tokens when it is finished
    latency: float = 0.0  # seconds of the tool call it stops at (target < final)


class KVCacheRows:
    """The engine's rows and their blocks (a part of SimulatedEngine, which holds the state
    below and gives a row its tokens: `_flush`)."""

    kv_blocks: int | None  # None: a cache without limit
    step: int
    stats: EngineStats
    _queue: deque[Trajectory]
    _rows: dict[int, Row]  # by row id, in the order admitted (ids rise)
    _finishing: list[tuple[int, int]]  # (finish step, row id), sorted
    _context0: int  # sum over rows of (base - admitted_at): context = this + rows x step
    _blocks: BlockCount  # blocks the rows hold: c_i = base - admitted_at
    _cached: PrefixCache  # preempted rows' prefixes
    _stale: int  # entries of preempted rows left in _finishing

    def _flush(self, row: Row, at: int | None = None) -> Trajectory: ...

    def _first_step_over_cache(self, steps: int) -> int | None:
        """The first of the next `steps` engine steps whose rows' blocks exceed the cache (at
        step t a row holds its context: base - admitted_at + t tokens), or None."""
        if self.kv_blocks is None:
            return None
        return self._blocks.first_step_over(self.step + 1, self.step + steps, self.kv_blocks)

    def _preempt(self, at: int) -> bool:
        """Preempt the newest rows until step `at` fits, as vLLM's scheduler does (recompute:
        the row's KV is dropped; it returns to the front of the queue with its tokens). False
        if rows finishing before `at` already made room."""
        preempted = []
        while self._blocks.blocks_at(at) > self.kv_blocks:
            preempted.append(self._preempt_newest()[1])
        if not preempted:
            return False
        self._requeue(preempted)
        return True

    def _preempt_newest(self) -> tuple[Row, Trajectory]:
        """Recompute mode: the newest row's KV is dropped (its prefix stays cached until the
        free queue reaches it) and its trajectory keeps the tokens it made."""
        if len(self._rows) == 1:
            raise ValueError(
                "vllm: one sequence needs more KV cache than the engines have; raise "
                "vllm.gpu_memory_utilization or vllm.tensor_parallel_size, or lower the context"
            )
        row_id = next(reversed(self._rows))  # the newest (ids rise): vLLM pops the end
        # of its running list
        row = self._rows.pop(row_id)
        self._leave(row, free=False)
        trajectory = self._flush(row)
        self._cached.keep(
            id(trajectory), row.base - row.admitted_at + self.step, self._blocks.block_size
        )
        self.stats.preemptions += 1
        return row, trajectory

    def _requeue(self, preempted: list[Trajectory]) -> None:
        """Preempted rows (newest first) back to the queue's front."""
        self._queue.extendleft(preempted)  # the last preempted (the oldest of them) first
        self._stale += len(preempted)  # their entries in _finishing, dropped when they come up
        if self._stale > len(self._rows):  # or now, once they outnumber the live ones
            self._finishing = [(end, i) for end, i in self._finishing if i in self._rows]
            self._stale = 0

    def _head_fits(self) -> bool:
        if self.kv_blocks is None:
            return True
        head = self._queue[0]
        need = blocks_for(head.context_length, self._blocks.block_size)
        return self._blocks.blocks_at(self.step + 1) + need <= self.kv_blocks

    def _fitting(self, most: int) -> tuple[list[Trajectory], list[int], list[int]]:
        """Up to `most` queued trajectories, first come first served, as long as their blocks
        fit beside the running rows' (the first that does not fit waits, and all behind it);
        with each, the tokens of its prefix still cached (a preempted row's: not recomputed),
        and its context."""
        if self.kv_blocks is None:
            admitted = [self._queue.popleft() for _ in range(most)]
            return admitted, [0] * most, [t.context_length for t in admitted]
        size = self._blocks.block_size
        held = self._blocks.blocks_at(self.step)
        admitted: list[Trajectory] = []
        cached: list[int] = []
        contexts: list[int] = []
        while self._queue and len(admitted) < most:
            context = self._queue[0].context_length
            if held + blocks_for(context, size) > self.kv_blocks and (admitted or self._rows):
                break
            trajectory = self._queue.popleft()
            hits = self._cached.hits(id(trajectory), held)
            held += blocks_for(context, size)
            found = 0 if hits is None else min(hits * size, context - 1)  # the last is computed
            if hits is not None:
                self.stats.tokens_recomputed += context - found
            admitted.append(trajectory)
            cached.append(found)
            contexts.append(context)
        return admitted, cached, contexts

    def _leave(self, row: Row, free: bool = True, count: bool = True) -> int:
        """The row stops holding blocks; `free`: they go to the end of vLLM's free queue (a
        preempted row's go there through PrefixCache.keep, which remembers them); `count`
        False: the caller takes them off the block count (returned: the row's offset)."""
        offset = row.base - row.admitted_at
        self._context0 -= offset
        if count:
            self._blocks.remove(offset)
        if free:
            self._cached.free(blocks_for(offset + self.step, self._blocks.block_size))
        return offset
