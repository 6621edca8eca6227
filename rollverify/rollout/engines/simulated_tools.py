"""Tool calls on the simulated engine (rollverify/cost/tool_latency.py): a response leaves the
engine at each call and waits, off the engine, until the virtual clock reaches the call's
answer; the call's output tokens then go into its context and it is queued again, like a new
request."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from rollverify.cost.tool_latency import ToolCallSampler
from rollverify.rollout.engines.sketch import Sketch
from rollverify.rollout.trajectory import Trajectory


class ToolCallsOut:
    """The responses waiting for their calls: a heap of (virtual time it answers, order,
    trajectory, output tokens); iterating gives its entries."""

    def __init__(self, sampler: ToolCallSampler | None) -> None:
        self.sampler = sampler  # None: responses make no calls
        self._waiting: list[tuple[float, int, Trajectory, int]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._waiting)

    def __iter__(self) -> Iterator[tuple[float, int, Trajectory, int]]:
        return iter(self._waiting)

    @property
    def next_answer(self) -> float:
        return self._waiting[0][0]

    @property
    def last_answer(self) -> float:
        return max(answered for answered, *_ in self._waiting)

    def next_call(self, trajectory: Trajectory, final: int) -> tuple[int, float]:
        """Where a response admitted now stops: its next call (generated tokens then, and the
        call's seconds), or its end (`final`, 0.0)."""
        calls = self.sampler(*trajectory.key, final)
        return next(((p, s) for p, s in calls if p > len(trajectory)), (final, 0.0))

    def call(self, trajectory: Trajectory, answers_at: float) -> None:
        output = self.sampler.output_tokens if self.sampler is not None else 0
        heapq.heappush(self._waiting, (answers_at, next(self._order), trajectory, output))

    def answered(self, until: float) -> list[Trajectory]:
        """The calls answered by virtual time `until`: their responses, the output in."""
        answered = []
        while self._waiting and self._waiting[0][0] <= until:
            _, _, trajectory, output = heapq.heappop(self._waiting)
            if isinstance(trajectory, Sketch):
                trajectory.tool_outputs.append((len(trajectory), output))
            answered.append(trajectory)
        return answered
