"""A rollout engine on a virtual clock: the real schedules (rollout.collect, verification,
switching) against the GPU cost model, with no model at all.

It does what the in-process engine does (engines/hf_engine.py), step for step:
- every running row decodes one token per engine step;
- a prefill yields an admitted row's first token;
- queued trajectories are admitted after a step's decode, in batches of `admit_batch`, or at
  once when nothing runs.
Each trajectory's total length comes from `lengths(group_id, sample_index)`: drawn once per
trajectory, so one that is paused and resumed ends where it would have.

With a KV cache (`kv_tokens`, rollverify/cost/kv_cache.py) it also does what vLLM's V1
scheduler does when memory runs out: rows hold blocks of `block_size` tokens; at a step whose
blocks would exceed the cache, the newest running rows are preempted (their KV is dropped,
they go back to the front of the queue with the tokens they made, and their prompt and those
tokens are prefilled again when they return: recomputation), and nothing is admitted in that
step; a queued trajectory is admitted only if its blocks fit (first come, first served: the
first that does not fit stops admission). All engines' caches are pooled, as their slots are.

Instead of stepping token by token, a poll jumps ahead to the next event: the next finish, or
the next admission. Time advances by the cost model's price of the decode steps in between
(closed form, costmodel.decode_run_seconds) and of each prefill. With `finishes_per_poll` = m
> 1 a poll runs until m rows have finished; admissions then wait for the poll's end, which
trades a little slot time for speed at paper scale.

The simulator prices work, it does not judge it: `rvctl simulate` feeds it Sketches,
trajectories that count their tokens instead of holding them (their rules, truncation and
regenerated tokens, are Trajectory's own); a real Trajectory gets placeholder tokens (id 0,
log-prob 0), as the tests that compare it with the hf engine need.

Its parts: the rows' KV cache (preemption, admission by fit, the prefix cache) in
simulated_kv.py; tool calls (a response off the engine until its call answers) in
simulated_tools.py; weights loaded in flight (asynchronous training) here; what it shares with
the compiled engine in simulated_base.py.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Iterable

import torch

from rollverify.cost.costmodel import StepCost
from rollverify.cost.kv_cache import BlockCount, PrefixCache, blocks_for
from rollverify.cost.trace import EngineStep
from rollverify.rollout.engines.batching import DECODE_KEEP, padded_positions
from rollverify.rollout.engines.protocol import EngineStats, QueuedSlots
from rollverify.rollout.engines.simulated_base import SimulatedBase
from rollverify.rollout.engines.simulated_kv import KVCacheRows, Row
from rollverify.rollout.engines.simulated_tools import ToolCallsOut
from rollverify.rollout.engines.sketch import Sketch
from rollverify.rollout.trajectory import Trajectory


class SimulatedEngine(SimulatedBase, KVCacheRows, QueuedSlots):
    # (rvctl simulate runs this model compiled where it can: engines/simulated_compiled.py)

    cost: StepCost  # each iteration's price: Pricing (a GPU), LinearStepCost (fitted)

    def _start(self, version: int) -> None:
        self.version = version
        self.stats = EngineStats()
        self.clock = 0.0  # virtual seconds on the modeled GPUs
        self.prefill_seconds = 0.0  # of those, admissions' prefills (resumes re-prefill)
        self.step = 0  # engine steps so far
        self._queue: deque[Trajectory] = deque()
        self._rows: dict[int, Row] = {}
        # (finish step, row id), sorted: the m-th next finish is an index away (a heap would
        # need nsmallest at every event, the simulator's hottest line at 64K)
        self._finishing: list[tuple[int, int]] = []
        self._ids = itertools.count()
        self._context0 = 0  # sum over rows of (base - admitted_at): context = this + rows x step
        self._blocks = BlockCount(self.block_size)  # the rows': c_i = base - admitted_at
        self._cached = PrefixCache(self.kv_blocks or 0)  # preempted rows' prefixes
        self._stale = 0  # entries of preempted rows left in _finishing
        # weights on the way, in the order the trainer sent them: (at, version, seconds,
        # recompute_kv); a trainer slower than the engines can send the next before one lands
        self._pending: deque[tuple[float, int, float, bool]] = deque()
        self._tools = ToolCallsOut(self.tool_calls)  # responses off the engine until it answers

    # -- the engine interface -----------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return bool(self._rows or self._queue or self._tools)

    def poll(self) -> list[Trajectory]:
        while self._pending and self.clock >= self._pending[0][0]:
            self._load_in_flight()  # each in turn: one that arrived during another's sync too
        self._queue.extend(self._tools.answered(until=self.clock))
        if not self._rows and not self._queue and self._tools:  # all wait for a tool: idle
            answered = self._tools.next_answer
            self.tool_wait_seconds += answered - self.clock
            self.clock = answered
            self._queue.extend(self._tools.answered(until=answered))
        finished = []
        if self._rows:
            steps = self._steps_until_arrival(self._steps_to_next_event())
            full = self._first_step_over_cache(steps)
            if full is not None:
                if full > self.step + 1:
                    finished += self._decode(full - self.step - 1)
                if self._preempt(at=full):
                    return finished  # vLLM admits nothing in a step that preempted
                return finished + self._admit()
            finished += self._decode(steps)
        finished += self._admit()
        return finished

    def pause(self) -> list[Trajectory]:
        # calls in flight are waited for and answered, as rollout/tool_calls.py does: the
        # engine idles meanwhile
        if self._tools:
            last = self._tools.last_answer
            self.tool_wait_seconds += max(0.0, last - self.clock)
            self.clock = max(self.clock, last)
        answered = self._tools.answered(until=self.clock)
        paused = [self._flush(row) for row in self._rows.values()] + list(self._queue) + answered
        self.stats.aborted += len(paused)
        self._rows, self._finishing, self._context0, self._stale = {}, [], 0, 0
        self._cached.free(self._blocks.blocks_at(self.step))
        self._cached.reset()  # the weights change next: what the cache holds is stale
        self._blocks.clear()
        self._queue.clear()
        return paused

    def load_weights(self, named_tensors: Iterable, version: int) -> None:
        if self.has_work:
            raise RuntimeError("pause the engine before loading weights: in-flight KV is stale")
        self._cached.reset()
        self.version = version

    def schedule_weights(
        self, version: int, at: float, seconds: float = 0.0, recompute_kv: bool = True
    ) -> None:
        """Asynchronous training: weights of `version` reach the engine at virtual time `at`
        while it runs. At its first poll from then on it stops at a token boundary, spends
        `seconds` loading them (the sync) and continues every sequence: tokens before carry
        the old version, tokens after the new. `recompute_kv`: the running rows' KV cache is
        prefilled again under the new weights (the default); False keeps the stale KV
        (PipelineRL's choice)."""
        self._pending.append((at, version, seconds, recompute_kv))

    def wait_for_weights(self) -> bool:
        """Nothing to do until the weights come: load the next now (the clock jumps to them).
        False if none are on the way."""
        if not self._pending:
            return False
        self._load_in_flight()
        return True

    def _steps_until_arrival(self, steps: int) -> int:
        """At most `steps`, and no more than it takes the clock to reach weights on the way or
        a tool's answer: they land at the first token boundary after they arrive, not at the
        next event."""
        arrivals = [self._pending[0][0]] if self._pending else []
        arrivals += [self._tools.next_answer] if self._tools else []
        if not arrivals:
            return steps
        arrival = min(arrivals)
        rows = len(self._rows)
        context = self._context0 + rows * (self.step + 1)
        padded = self._padded() if self.cost.reads_padding else context

        def reaches(count: int) -> bool:
            return self.clock + self.cost.decode_run(rows, context, padded, count) >= arrival

        if not reaches(steps):
            return steps
        low, high = 1, steps  # the fewest steps that reach it
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if reaches(middle) else (middle + 1, high)
        return low

    def _load_in_flight(self) -> None:
        at, version, seconds, recompute_kv = self._pending.popleft()
        self.idle_seconds += max(0.0, at - self.clock)  # waiting for the trainer
        self.clock = max(self.clock, at) + seconds
        contexts = []
        for row in self._rows.values():
            offset = row.base - row.admitted_at
            trajectory = self._flush(row)  # what it made so far, under the old weights
            row.admitted_at, row.base = self.step + 1, offset + self.step + 1  # same context
            contexts.append(trajectory.context_length)
        if recompute_kv and contexts:
            price = self.cost.iteration(
                EngineStep(
                    0, 0, len(contexts), sum(contexts), sum(n * (n + 1) // 2 for n in contexts)
                )
            )
            self.clock += price
            self.prefill_seconds += price
            self.stats.tokens_prefilled += sum(contexts)
            self.stats.tokens_recomputed_on_update += sum(contexts)
        self._cached.reset()  # cached prefixes hold the old weights' KV
        self.version = version

    def reset_stats(self) -> None:
        self.stats = EngineStats()

    # -- events -------------------------------------------------------------------------------

    def _steps_to_next_event(self) -> int:
        """Decode steps until the next finish (the m-th with finishes_per_poll = m), or one if
        the queue would be admitted after this step's decode (as the hf engine does). A queue
        whose first trajectory does not fit the KV cache waits for a finish: decoding only
        takes blocks, finishing gives them back."""
        free = self.slots - len(self._rows)
        if self._queue and self._admissible(free) and self._head_fits():
            return 1
        ends = self._finishing[: self.finishes_per_poll]
        return max(1, ends[-1][0] - self.step)

    def _decode(self, steps: int) -> list[Trajectory]:
        rows = len(self._rows)
        context = self._context0 + rows * (self.step + 1)
        padded = self._padded() if self.cost.reads_padding else context
        self.clock += self.cost.decode_run(rows, context, padded, steps)
        self.step += steps
        self.stats.decode_steps += steps
        self.stats.slot_steps_busy += rows * steps
        finished = []
        done = bisect.bisect_right(self._finishing, (self.step, float("inf")))
        ending = self._finishing[:done]
        del self._finishing[:done]
        offsets = []  # of the rows finishing: their blocks leave the count in one go
        for end, row_id in ending:
            if row_id not in self._rows:
                continue  # preempted: it finishes under a new id
            row = self._rows.pop(row_id)
            offsets.append(self._leave(row, count=False))
            # a row that ended inside the jump generated no tokens past its end
            self.stats.slot_steps_busy -= self.step - end
            finished += self._left(row, self._flush(row, at=end))
        self._blocks.add_many(offsets, sign=-1)
        return finished

    def _padded(self) -> int:
        """Positions this step attends with padding: the hf engine's bands of similar length,
        each padded to its longest (engines/batching.py)."""
        now = self.step + 1
        lengths = [row.base - row.admitted_at + now for row in self._rows.values()]
        return padded_positions(lengths, DECODE_KEEP)

    def _admissible(self, free: int) -> bool:
        wanted = min(self.admit_batch, len(self._queue))
        return min(free, len(self._queue)) >= wanted or not self._rows

    def _admit(self) -> list[Trajectory]:
        free = self.slots - len(self._rows)
        if not self._queue or not self._admissible(free):
            return []
        admitted, cached, contexts = self._fitting(min(free, len(self._queue)))
        if not admitted:
            return []
        step = EngineStep(
            0,
            0,
            len(admitted),
            sum(contexts) - sum(cached),
            sum(n * (n + 1) // 2 - h * (h + 1) // 2 for n, h in zip(contexts, cached, strict=True)),
            prefill_padded=padded_positions(contexts),  # grouped as the hf engine does
        )
        price = self.cost.iteration(step)
        self.clock += price
        self.prefill_seconds += price
        finished = []
        offsets = []  # of the rows admitted: their blocks are counted in one go
        for trajectory, context in zip(admitted, contexts, strict=True):
            row = self._row(trajectory, context)
            end = self.step + row.target - len(trajectory) - 1  # the prefill made one token
            if end <= self.step:  # done at its prefill: its blocks go straight back
                self._cached.free(blocks_for(context, self._blocks.block_size))
                finished += self._left(row, self._flush(row, at=self.step))
                continue
            row_id = next(self._ids)
            self._rows[row_id] = row
            self._context0 += row.base - row.admitted_at
            offsets.append(row.base - row.admitted_at)
            bisect.insort(self._finishing, (end, row_id))
        self._blocks.add_many(offsets)
        self.stats.tokens_prefilled += step.prefill_tokens
        return finished

    def _flush(self, row: Row, at: int | None = None) -> Trajectory:
        """Give the row's trajectory the tokens it generated up to step `at` (default: now),
        finished if it reached its length."""
        at = self.step if at is None else at
        trajectory = row.trajectory
        count = min(at - row.admitted_at + 1, row.target - len(trajectory))
        self.stats.tokens_generated += count
        if isinstance(trajectory, Sketch):
            self.stats.tokens_regenerated += trajectory.generate(count, self.version)
        else:
            self.stats.tokens_regenerated += trajectory.extend(
                torch.zeros(count, dtype=torch.long), torch.zeros(count), self.version
            )
        if len(trajectory) >= row.final:
            trajectory.finish_reason = "length" if row.final >= self.max_new_tokens else "stop"
        return trajectory

    # -- tool calls (simulated_tools.py) ------------------------------------------------------

    def _row(self, trajectory: Trajectory, context: int) -> Row:
        """A row admitted now: it leaves at its end, or at its next tool call."""
        drawn = self.lengths(trajectory.group_id, trajectory.sample_index)
        final = max(min(drawn, self.max_new_tokens), len(trajectory) + 1)
        if self.tool_calls is None:  # (the usual case, at every admission)
            return Row(trajectory, self.step, context, final, final)
        after, latency = self._tools.next_call(trajectory, final)
        return Row(trajectory, self.step, context, after, final, latency)

    def _left(self, row: Row, trajectory: Trajectory) -> list[Trajectory]:
        """A row out of the engine: finished, or off to its tool call (answered at virtual
        time now + its latency, then queued again like a new request)."""
        if row.target >= row.final:
            return [trajectory]
        self.calls_made += 1
        self._tools.call(trajectory, answers_at=self.clock + row.latency)
        return []
