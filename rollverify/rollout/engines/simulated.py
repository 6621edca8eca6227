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
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from rollverify.cost.costmodel import StepCost
from rollverify.cost.kv_cache import BLOCK_SIZE, BlockCount, PrefixCache, blocks_for
from rollverify.cost.tool_latency import ToolCallSampler
from rollverify.cost.trace import EngineStep
from rollverify.rollout.engines.batching import DECODE_KEEP, padded_positions
from rollverify.rollout.engines.protocol import EngineStats, QueuedSlots
from rollverify.rollout.engines.sketch import Sketch
from rollverify.rollout.trajectory import Trajectory


@dataclass
class _Row:
    trajectory: Trajectory
    admitted_at: int  # engine step of the prefill (its first token)
    base: int  # context at admission: prompt + tokens the trajectory had
    target: int  # generated tokens when it leaves the engine: at its end, or at a tool call
    final: int  # generated tokens when it is finished
    latency: float = 0.0  # seconds of the tool call it stops at (target < final)


class NoModel:
    """The engine interface's parts that a model would do, on an engine without one (the
    simulated engines: SimulatedEngine, simulated_compiled.CompiledSimulatedEngine)."""

    step: int

    def start(self) -> dict:
        return {"seconds": 0.0}

    def shutdown(self) -> None:
        pass

    def probe_logprobs(self, token_ids: list[int]) -> torch.Tensor:
        return torch.zeros(1, max(0, len(token_ids) - 1))  # no model: nothing to disagree with

    def take_trace(self) -> list[EngineStep]:
        return []  # the clock is the price: nothing to trace

    def sampling_state(self) -> torch.Tensor:
        return torch.tensor([self.step])

    def load_sampling_state(self, state: torch.Tensor) -> None:
        pass  # lengths come from `lengths`, not from a random stream

    @contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        yield


class SimulatedEngine(NoModel, QueuedSlots):
    # (rvctl simulate runs this model compiled where it can: engines/simulated_compiled.py)

    def __init__(
        self,
        cost: StepCost,
        slots: int,
        max_new_tokens: int,
        lengths: Callable[[int, int], int],
        admit_batch: int | None = None,
        finishes_per_poll: int = 1,
        version: int = 0,
        kv_tokens: int | None = None,
        block_size: int = BLOCK_SIZE,
        tool_calls: ToolCallSampler | None = None,
    ) -> None:
        self.cost = cost  # each iteration's price: Pricing (a GPU), LinearStepCost (fitted)
        self.slots = slots
        self.max_new_tokens = max_new_tokens
        self.temperature, self.top_p, self.top_k = 1.0, 1.0, 0
        self.lengths = lengths
        self.admit_batch = admit_batch or max(1, slots // 8)  # as the hf engine
        self.finishes_per_poll = finishes_per_poll
        self.version = version
        self.stats = EngineStats()
        self.clock = 0.0  # virtual seconds on the modeled GPUs
        self.prefill_seconds = 0.0  # of those, admissions' prefills (resumes re-prefill)
        self.idle_seconds = 0.0  # of those, waiting for weights (asynchronous training)
        self.step = 0  # engine steps so far
        self._queue: deque[Trajectory] = deque()
        self._rows: dict[int, _Row] = {}
        # (finish step, row id), sorted: the m-th next finish is an index away (a heap would
        # need nsmallest at every event, the simulator's hottest line at 64K)
        self._finishing: list[tuple[int, int]] = []
        self._ids = itertools.count()
        self._context0 = 0  # sum over rows of (base - admitted_at): context = this + rows x step
        # KV blocks: None is a cache without limit (today's engines up to their slots)
        self.kv_blocks = None if kv_tokens is None else kv_tokens // block_size
        self._blocks = BlockCount(block_size)  # blocks the rows hold: c_i = base - admitted_at
        self._cached = PrefixCache(self.kv_blocks or 0)  # preempted rows' prefixes
        self._stale = 0  # entries of preempted rows left in _finishing
        # weights on the way, in the order the trainer sent them: (at, version, seconds,
        # recompute_kv); a trainer slower than the engines can send the next before one lands
        self._pending: deque[tuple[float, int, float, bool]] = deque()
        # tool calls (rollverify/cost/tool_latency.py): responses out of the engine until their
        # call answers, a heap of (virtual time it answers, order, trajectory, output tokens)
        self.tool_calls = tool_calls
        self._tools: list[tuple[float, int, Trajectory, int]] = []
        self._tool_order = itertools.count()
        self.calls_made = 0
        self.tool_wait_seconds = 0.0  # idle: every response was waiting for a tool

    # -- the engine interface -----------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return bool(self._rows or self._queue or self._tools)

    def poll(self) -> list[Trajectory]:
        while self._pending and self.clock >= self._pending[0][0]:
            self._load_in_flight()  # each in turn: one that arrived during another's sync too
        self._answer_calls(until=self.clock)
        if not self._rows and not self._queue and self._tools:  # all wait for a tool: idle
            answered = self._tools[0][0]
            self.tool_wait_seconds += answered - self.clock
            self.clock = answered
            self._answer_calls(until=answered)
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
            last = max(answered for answered, *_ in self._tools)
            self.tool_wait_seconds += max(0.0, last - self.clock)
            self.clock = max(self.clock, last)
        answered = self._answer_calls(until=self.clock, queue=False)
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
        arrivals += [self._tools[0][0]] if self._tools else []
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

    # -- the KV cache ---------------------------------------------------------------------------

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

    def _preempt_newest(self) -> tuple[_Row, Trajectory]:
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

    def _leave(self, row: _Row, free: bool = True, count: bool = True) -> int:
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

    def _flush(self, row: _Row, at: int | None = None) -> Trajectory:
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

    # -- tool calls -----------------------------------------------------------------------------

    def _row(self, trajectory: Trajectory, context: int) -> _Row:
        """A row admitted now: it leaves at its end, or at its next tool call."""
        drawn = self.lengths(trajectory.group_id, trajectory.sample_index)
        final = max(min(drawn, self.max_new_tokens), len(trajectory) + 1)
        if self.tool_calls is None:  # (the usual case, at every admission)
            return _Row(trajectory, self.step, context, final, final)
        calls = self.tool_calls(*trajectory.key, final)
        after, latency = next(((p, s) for p, s in calls if p > len(trajectory)), (final, 0.0))
        return _Row(trajectory, self.step, context, after, final, latency)

    def _left(self, row: _Row, trajectory: Trajectory) -> list[Trajectory]:
        """A row out of the engine: finished, or off to its tool call (answered at virtual
        time now + its latency, then queued again like a new request)."""
        if row.target >= row.final:
            return [trajectory]
        output = self.tool_calls.output_tokens if self.tool_calls is not None else 0
        self.calls_made += 1
        entry = (self.clock + row.latency, next(self._tool_order), trajectory, output)
        heapq.heappush(self._tools, entry)
        return []

    def _answer_calls(self, until: float, queue: bool = True) -> list[Trajectory]:
        """The calls answered by virtual time `until`: their output goes in, and the responses
        back to the queue (or, `queue` False, to the caller)."""
        answered = []
        while self._tools and self._tools[0][0] <= until:
            _, _, trajectory, output = heapq.heappop(self._tools)
            if isinstance(trajectory, Sketch):
                trajectory.tool_outputs.append((len(trajectory), output))
            answered.append(trajectory)
        if queue:
            self._queue.extend(answered)
        return answered
