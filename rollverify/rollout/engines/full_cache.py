"""The fast model of a full KV cache, for the simulated engine (engines/simulated.py, exact=False).

Exactly, a full cache preempts one or two rows at almost every engine step and readmits them at
the next finish, one event each: millions in a run at the paper's scale. The fast model takes
the window up to the m-th next finish (finishes_per_poll) in one go:
- when the cache overflows, it preempts at once the newest rows that the window would preempt
  one by one, and admits no one before the window's end (`_preempt_window`);
- at the window's end, it admits the queue's head rows that fit through the next window; those
  that fit now but not through it would be admitted and preempted again within a few steps,
  readmitted at the next finish, and so on (a full cache refills to the brim at each finish,
  and every block its rows grow by is taken from the newest rows): as many blocks cycle as the
  rows grow over the window. They are priced (their prefill, counted as preemptions and
  recomputed tokens) but not stepped, and stay at the queue's front without the token each
  prefill made (`_cycle`).
tests/test_kv_cache.py holds it to the exact model; docs/cost-model.md gives the gap.
"""

from __future__ import annotations

import itertools

import numpy as np

from rollverify.cost.kv_cache import blocks_for


class FastFullCache:
    """The fast model's part of SimulatedEngine (a mixin: it reads the engine's rows, queue,
    blocks and stats, and sets `_hold`, the step before which a window fits, and
    `_saturated`, true once a window preempted)."""

    def _window_end(self) -> int:
        """The step of the m-th next finish (m = finishes_per_poll): the window's end."""
        count, last = 0, self.step + 1
        for end, row_id in self._finishing:
            if row_id in self._rows:
                count, last = count + 1, end
                if count == self.finishes_per_poll:
                    break
        return max(last, self.step + 1)

    def _window_free(self, until: int) -> list[tuple[int, int]]:
        """Free blocks at each step where the rows' blocks peak until `until`: the last step of
        each row finishing before it (its blocks go back after that step) and `until`; between
        two of these, blocks held only grow."""
        size = self._blocks.block_size
        leaving = []  # (last step, offset) of rows finishing in the window
        for end, row_id in self._finishing:
            if end >= until:
                break
            row = self._rows.get(row_id)
            if row is not None:
                leaving.append((end, row.base - row.admitted_at))
        if not leaving:
            return [(until, self.kv_blocks - self._blocks.blocks_at(until))]
        ends, offsets = np.array(leaving).T
        steps = np.unique(np.append(ends, until))
        # the blocks rows that left before each peak held then [peaks, rows], summed
        gone = (ends < steps[:, None]) * -(-(offsets + steps[:, None]) // size)
        free = [self.kv_blocks - self._blocks.blocks_at(t) for t in steps.tolist()]
        held = (np.array(free) + gone.sum(axis=1)).tolist()
        return list(zip(steps.tolist(), held, strict=True))

    def _preempt_window(self, at: int) -> bool:
        """The fast model of _preempt: preempt the newest rows until the rest fit through the
        window's end (not only step `at`), and admit no one before it."""
        until = max(at, self._window_end())
        size = self._blocks.block_size
        preempted = []
        while True:
            peaks = self._window_free(until)
            tight, free = min(peaks, key=lambda peak: peak[1])
            if free >= 0:
                break
            while free < 0:  # (at the tightest step; the loop above checks every step again)
                row, trajectory = self._preempt_newest()
                free += blocks_for(row.base - row.admitted_at + tight, size)
                preempted.append(trajectory)
        if not preempted:
            return False
        self._requeue(preempted)
        self._hold, self._saturated = until, True
        return True

    def _survivors(self, most: int, peaks: list[tuple[int, int]]) -> int:
        """How many of the queue's head rows (at most `most`) to admit at a window's start:
        the longest run that fits now (first come, first served) and at each of the window's
        peaks (`_window_free`) as its rows grow."""
        size = self._blocks.block_size
        held = self._blocks.blocks_at(self.step)
        contexts = []
        for trajectory in itertools.islice(self._queue, most):
            context = trajectory.context_length
            if held + blocks_for(context, size) > self.kv_blocks and (contexts or self._rows):
                break
            held += blocks_for(context, size)
            contexts.append(context)
        if not contexts:
            return 0
        # blocks each would hold at each peak [rows, peaks], summed down the queue (numpy: a
        # window holds tens of peaks and the head hundreds of rows)
        grown = np.array([t - self.step for t, _ in peaks])
        held_at = (-(-(np.array(contexts)[:, None] + grown) // size)).cumsum(axis=0)
        fits = (held_at <= np.array([free for _, free in peaks])).all(axis=1)
        return len(contexts) if fits.all() else int(fits.argmin())

    def _cycle(self, most: int, admitted: list[int]) -> tuple[int, int]:
        """Rows the window's churn admits and preempts, and the context priced for each (the
        queue head's: the rows that cycle are alike). Exactly, a full cache refills to the
        brim at each finish, and each block its rows grow by until the next is taken from the
        newest rows, preempted: as many blocks cycle as the rows grow over the window. None
        while free slots (`most`) or the queue run out; `admitted`: the contexts just admitted."""
        most -= len(admitted)
        if most <= 0 or not self._queue:
            return 0, 0
        size = self._blocks.block_size
        context = self._queue[0].context_length
        held = self._blocks.blocks_at(self.step) + sum(blocks_for(n, size) for n in admitted)
        if held + blocks_for(context, size) > self.kv_blocks:
            return 0, 0  # the head does not fit now: it waits, exactly too
        steps = self._hold - self.step
        grown = self._blocks.blocks_at(self._hold) - self._blocks.blocks_at(self.step)
        grown += len(admitted) * steps // size  # (rows admitted now: not in the count yet)
        cycled = grown // blocks_for(context, size)
        self.stats.preemptions += cycled
        self.stats.tokens_recomputed += cycled * context
        return cycled, context
