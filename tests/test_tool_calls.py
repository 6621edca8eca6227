"""Tool calls in a rollout (rollverify/rollout/tool_calls.py) on the real in-process engine:
the engine stops at a call's closing marker, the output goes in as tokens the policy did not
sample, generation continues from the true context, and a pause while a call runs loses nothing
and runs nothing twice."""

from __future__ import annotations

import threading
import time

import torch

from rollverify.rollout.engines.hf_engine import HFEngine
from rollverify.rollout.tool_calls import ToolCallingEngine, ToolOutput, calls_made
from rollverify.rollout.trajectory import Trajectory
from tests.tiny import EOS, PAD, prompts, random_model, teacher_forced_logprobs

MARKER = 5  # the call's closing marker: a token the random model samples often
OUTPUT = [7, 8, 9]


class EchoRunner:
    """Answers every call with OUTPUT after `seconds`; records each call it ran."""

    closing_token_id = MARKER
    inline = False  # in worker threads, beside the engine

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.ran: list[tuple[tuple[int, int], int]] = []  # (trajectory, its length at the call)
        self.lock = threading.Lock()

    def run(self, trajectory: Trajectory) -> ToolOutput:
        time.sleep(self.seconds)
        with self.lock:
            self.ran.append((trajectory.key, len(trajectory)))
        return ToolOutput(list(OUTPUT))


def _engine(model, runner, max_tool_calls=2, slots=3, max_new_tokens=30):
    inner = HFEngine(model, slots, max_new_tokens, EOS, PAD, stop_token_ids=(MARKER,), seed=1)
    return ToolCallingEngine(inner, runner, max_tool_calls)


def _run(engine) -> list[Trajectory]:
    finished = []
    while engine.has_work:
        finished += engine.poll()
    return finished


def _outputs(trajectory: Trajectory) -> list[list[int]]:
    """The token spans the policy did not sample, in order."""
    if trajectory.policy is None:
        return []
    spans, current = [], []
    for token, mine in zip(trajectory.token_ids.tolist(), trajectory.policy.tolist(), strict=True):
        if not mine:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    return spans + ([current] if current else [])


def test_calls_run_once_their_output_is_not_the_policys_and_decoding_reads_it():
    model = random_model(eos_bias=-1.5)
    runner = EchoRunner()
    engine = _engine(model, runner)
    trajectories = [Trajectory(p, g, 0) for g, p in enumerate(prompts(8))]
    engine.submit(trajectories)
    finished = _run(engine)
    assert sorted(t.key for t in finished) == sorted(t.key for t in trajectories)
    assert sum(calls_made(t) for t in finished) == len(runner.ran) > 0
    for t in finished:
        assert calls_made(t) <= 2
        assert all(span == OUTPUT[: len(span)] for span in _outputs(t))
        tokens, policy = t.token_ids.tolist(), t.policy_mask().tolist()
        for i, mine in enumerate(policy):  # each output follows the policy's closing marker
            if not mine and (i == 0 or policy[i - 1]):
                assert tokens[i - 1] == MARKER
        # the policy's tokens were sampled from the whole context, tool output included
        expected = teacher_forced_logprobs(model, t)
        mask = t.policy_mask()
        assert torch.allclose(t.behavior_logprobs[mask], expected[mask], atol=1e-5), t.key
        if t.finish_reason == "stop" and tokens[-1] == MARKER:
            assert calls_made(t) == 2  # a third call is not run: max_tool_calls


def test_a_pause_during_calls_keeps_their_output_and_resuming_runs_nothing_twice():
    model = random_model(eos_bias=-1.5)
    runner = EchoRunner(seconds=0.2)
    engine = _engine(model, runner, max_tool_calls=3)
    trajectories = [Trajectory(p, g, 0) for g, p in enumerate(prompts(6, seed=3))]
    engine.submit(trajectories)
    finished = []
    while not engine._running:  # until a call is in flight
        finished += engine.poll()
    paused = engine.pause()
    assert not engine.has_work
    for t in paused:  # no call without its result
        awaiting = len(t) and t.token_ids[-1] == MARKER and t.policy_mask()[-1]
        assert not awaiting or t.finished
    assert sum(calls_made(t) for t in paused + finished) == len(runner.ran) >= 1
    finished += [t for t in paused if t.finished]  # a call's output used up the budget
    engine.submit([t for t in paused if not t.finished])
    finished += _run(engine)
    assert sorted(t.key for t in finished) == sorted(t.key for t in trajectories)
    assert sum(calls_made(t) for t in finished) == len(runner.ran)
    assert len(set(runner.ran)) == len(runner.ran)  # no call ran twice


def test_an_unanswered_call_from_a_checkpoint_runs_once_on_submit():
    model = random_model(eos_bias=-1.5)
    runner = EchoRunner()
    engine = _engine(model, runner, max_tool_calls=1)
    t = Trajectory(torch.tensor([3, 4]), 0, 0)
    t.extend([2, MARKER], [-1.0, -1.0], 0)  # killed as the engine reported the call
    engine.submit([t])
    (done,) = _run(engine)
    assert runner.ran[0] == ((0, 0), 2) and _outputs(done)[0] == OUTPUT[: len(_outputs(done)[0])]
    assert calls_made(done) == 1


class BusyRunner(EchoRunner):
    """Each call sleeps `seconds`, spins its thread `spin` CPU seconds and reports `elsewhere`
    CPU seconds used in another process (as a sandboxed program's)."""

    def __init__(self, seconds: float, spin: float, elsewhere: float) -> None:
        super().__init__(seconds)
        self.spin, self.elsewhere = spin, elsewhere

    def run(self, trajectory: Trajectory) -> ToolOutput:
        output = super().run(trajectory)
        started = time.thread_time()
        while time.thread_time() - started < self.spin:
            pass
        return ToolOutput(output.token_ids, cpu_seconds=self.elsewhere)


def test_the_engines_wait_and_the_calls_cpu_time_are_counted():
    """One trajectory: while its call runs the engine has nothing to decode, so it waits out
    every call (the ledger's tool phase); the calls' CPU time is their threads' plus their
    processes'."""
    runner = BusyRunner(seconds=0.1, spin=0.05, elsewhere=0.5)
    engine = _engine(random_model(eos_bias=-1.5), runner, max_tool_calls=4, slots=1)
    engine.submit([Trajectory(prompts(1)[0], 0, 0)])
    started = time.perf_counter()
    _run(engine)
    wall = time.perf_counter() - started
    stats, calls = engine.tool_stats, len(runner.ran)
    assert stats.calls == calls > 0
    # sleep and spin (0.15 s), less the thread's start: the engine starts waiting once it has
    # nothing to decode, after the call began (seen 0.3 ms short on a loaded machine)
    assert 0.14 * calls <= stats.waited <= wall
    assert 0.55 * calls <= stats.cpu_seconds <= (0.55 + 0.05) * calls
