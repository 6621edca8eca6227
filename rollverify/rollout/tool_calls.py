"""Tool calls inside a rollout: any engine, wrapped, runs multi-turn trajectories.

A policy calls a tool by generating the call's closing marker, a token the engine stops at as
it stops at end-of-sequence. `ToolCallingEngine` then takes the trajectory out of the engine,
runs the call in a worker thread (the engine keeps decoding the other rows meanwhile), appends
the output as tokens the policy did not sample (`Trajectory.extend_tool_output`: no behavior
log-prob, the call's version, out of OPS, verification and the loss) and submits it again,
where it continues like any resumed trajectory (its prompt and tokens prefilled). Token ids are
never rebuilt from text: the output's ids are appended to the ids the engine produced
(token-in / token-out).

Pauses (partial rollout's end of a step, a stop): `pause()` waits for the calls in flight and
appends their output, so a paused trajectory never holds a call without its result. A
trajectory that does anyway (a checkpoint from a kill, taken as the engine reported a call) has
the call run when it is submitted again: its output goes in once, because a trajectory awaits
output only while its last token is the closing marker.

After `max_tool_calls` calls a trajectory that ends at the marker again is finished ("stop"),
its last call not run (verl's max turns).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol

from rollverify.infra.kill_points import kill_point
from rollverify.rollout.engines.protocol import RolloutEngine
from rollverify.rollout.trajectory import Trajectory


@dataclass(frozen=True)
class ToolOutput:
    token_ids: list[int]  # the output as the policy will read it, in its tokenizer's ids
    error: bool = False  # the call failed (an exception, a non-zero exit)
    timed_out: bool = False
    broken: bool = False  # the tool itself failed (a sandbox that could not run the code)
    cpu_seconds: float = 0.0  # what the call used in other processes (a sandbox's program)


class ToolRunner(Protocol):
    closing_token_id: int  # the token that ends a call: the engine stops at it
    inline: bool  # run calls in the engine's thread, at once (a tool of microseconds, whose
    # timing must not change which step a trajectory resumes at: a seeded run repeats)

    def run(self, trajectory: Trajectory) -> ToolOutput:
        """Run the call that ends `trajectory` (its last token is the closing marker)."""
        ...


@dataclass
class ToolStats:
    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    broken: int = 0  # calls the tool itself failed to run (counted in errors too)
    seconds: float = 0.0  # summed over calls (they overlap each other and the engine)
    cpu_seconds: float = 0.0  # the calls' CPU time: their threads' and their processes'
    waited: float = 0.0  # wall seconds the engine had nothing to decode until a call answered

    def since(self, earlier: ToolStats) -> ToolStats:
        """What happened after `earlier` (a copy of these stats taken then)."""
        return ToolStats(
            *(getattr(self, f.name) - getattr(earlier, f.name) for f in fields(ToolStats))
        )


class ToolCountsSince:
    """An engine's tool calls since the last look (a rollout's: in asynchronous training the
    engine also runs between batches; an evaluation counts its calls apart, counted_apart)."""

    def __init__(self) -> None:
        self.seen = ToolStats()  # the engine's counts at the last look

    def take(self, engine: RolloutEngine | None) -> ToolStats | None:
        """The calls since the last take; None for an engine without a tool (or none)."""
        stats = getattr(engine, "tool_stats", None)
        if stats is None:
            return None
        now = replace(stats)
        since, self.seen = now.since(self.seen), now
        return since


def calls_made(trajectory: Trajectory) -> int:
    """Tool outputs in the trajectory: runs of tokens the policy did not sample."""
    if trajectory.policy is None:
        return 0
    policy = trajectory.policy.int()
    return int(((policy[:-1] == 1) & (policy[1:] == 0)).sum())


class ToolCallingEngine:
    """`inner` (any RolloutEngine) with tool calls; the same interface (attributes and methods
    it does not define are the inner engine's)."""

    def __init__(
        self, inner: RolloutEngine, runner: ToolRunner, max_tool_calls: int, workers: int = 2
    ) -> None:
        self.inner = inner
        self.runner = runner
        self.max_tool_calls = max_tool_calls
        self.tool_stats = ToolStats()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="tool-call")
        self._running: dict[tuple[int, int], tuple[Trajectory, Future]] = {}

    def __getattr__(self, name: str) -> Any:  # version, stats, load_weights, ...: the engine's
        return getattr(self.inner, name)

    # -- the engine interface -----------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return self.inner.has_work or bool(self._running)

    def idle_slots(self) -> int:
        return self.inner.idle_slots()

    def submit(self, trajectories: list[Trajectory]) -> None:
        for trajectory in trajectories:
            if self._calls(trajectory):
                self._start(trajectory)  # a checkpoint's unanswered call: run it now
            else:
                self.inner.submit([trajectory])

    def poll(self) -> list[Trajectory]:
        finished = []
        for trajectory in self.inner.poll():
            if self._calls(trajectory):
                self._start(trajectory)
            else:
                finished.append(trajectory)
        if self._running and not self.inner.has_work:  # nothing to decode: wait for a call
            with self._waiting():
                wait([f for _, f in self._running.values()], return_when="FIRST_COMPLETED")
        for key, (trajectory, future) in list(self._running.items()):
            if future.done():
                del self._running[key]
                if self._answer(trajectory, future.result()):
                    finished.append(trajectory)
                else:
                    self.inner.submit([trajectory])
        return finished

    def pause(self) -> list[Trajectory]:
        paused = self.inner.pause()
        for trajectory in paused:
            if self._calls(trajectory):
                self._start(trajectory)
        answered = [trajectory for trajectory, _ in self._running.values()]
        with self._waiting():
            results = [future.result() for _, future in self._running.values()]
        for trajectory, result in zip(answered, results, strict=True):
            self._answer(trajectory, result)  # kept: never lost, never run again
        self._running.clear()
        keys = {t.key for t in answered}
        return [t for t in paused if t.key not in keys] + answered

    def shutdown(self) -> None:
        self.close()
        self.inner.shutdown()

    @contextmanager
    def counted_apart(self) -> Iterator[ToolStats]:
        """The block's calls counted in stats of their own (an evaluation's), not in
        `tool_stats`, the rollouts'."""
        kept = self.tool_stats
        self.tool_stats = ToolStats()
        try:
            yield self.tool_stats
        finally:
            self.tool_stats = kept

    def close(self) -> None:
        """Stop the tool's worker threads, leaving the engine running (a shared one)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    # -- calls --------------------------------------------------------------------------------

    def _calls(self, trajectory: Trajectory) -> bool:
        """Its last token is the policy's closing marker, its output not appended yet (the
        engine stopped there, "stop", or it was paused or checkpointed there, unfinished), and
        it may still call: below max_tool_calls and not out of budget ("length")."""
        if trajectory.finish_reason not in (None, "stop") or not len(trajectory):
            return False
        if int(trajectory.token_ids[-1]) != self.runner.closing_token_id:
            return False
        mine = trajectory.policy is None or bool(trajectory.policy[-1])
        return mine and calls_made(trajectory) < self.max_tool_calls

    def _start(self, trajectory: Trajectory) -> None:
        trajectory.finish_reason = None  # it goes on after the output
        if self.runner.inline:
            future: Future = Future()
            future.set_result(self._timed(trajectory))
        else:
            future = self._pool.submit(self._timed, trajectory)
        self._running[trajectory.key] = (trajectory, future)

    @contextmanager
    def _waiting(self) -> Iterator[None]:
        """The engine idles in this block until calls answer: booked as the ledger's tool
        phase (rollverify/cost/ledger.py)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.tool_stats.waited += time.perf_counter() - started

    def _timed(self, trajectory: Trajectory) -> tuple[ToolOutput, float, float]:
        """The call's output, wall seconds and CPU seconds (its thread's, and its processes'
        as the runner reports them)."""
        kill_point("tool-call", self.inner.version + 1)  # tests: killed with a call pending
        started, cpu_started = time.perf_counter(), time.thread_time()
        output = self.runner.run(trajectory)
        cpu = time.thread_time() - cpu_started + output.cpu_seconds
        return output, time.perf_counter() - started, cpu

    def _answer(self, trajectory: Trajectory, result: tuple[ToolOutput, float, float]) -> bool:
        """Append the call's output (cut to the token budget); True if that used the budget
        up (the trajectory is finished, "length")."""
        output, seconds, cpu_seconds = result
        stats = self.tool_stats
        stats.calls += 1
        stats.errors += output.error
        stats.timeouts += output.timed_out
        stats.broken += output.broken
        stats.seconds += seconds
        stats.cpu_seconds += cpu_seconds
        room = self.inner.max_new_tokens - len(trajectory)
        trajectory.extend_tool_output(output.token_ids[:room], int(trajectory.versions[-1]))
        if len(trajectory) >= self.inner.max_new_tokens:
            trajectory.finish_reason = "length"
            return True
        return False
