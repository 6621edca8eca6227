"""The embedded tool task: demonstrations, the calculator, and runs that call it."""

import random
import signal
from pathlib import Path

import pytest
import torch

from rollverify.config import load_config
from rollverify.core.methods import METHODS
from rollverify.rollout.tool_calls import calls_made
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.chain import chain_reward, sample_problems
from rollverify.tasks.chain_tool import CALL, Calculator, solution_with_calls
from rollverify.tiny.tokenizer import TOOL_CHARACTERS, build_char_tokenizer
from rollverify.training.checkpoint.files import latest
from rollverify.training.run import resume, train
from tests.cli import run_cli
from tests.runs import (
    assert_same_weights_and_cache,
    cached,
    groups_in_play,
    history,
    stopped_after,
    tiny,
    tiny_file,
)


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer(TOOL_CHARACTERS)


def ids(tokenizer, text: str) -> torch.Tensor:
    return torch.tensor(tokenizer(text)["input_ids"], dtype=torch.long)


def test_demonstrations_call_at_their_rate_and_a_called_step_is_exact():
    rng = random.Random(0)
    problems = sample_problems(400, seed=1)
    texts = [solution_with_calls(p, noise=0.5, call_rate=0.3, rng=rng) for p in problems]
    steps = [line for text in texts for line in text.split("#")[0].split(";")[1:]]
    called = [line for line in steps if CALL in line]
    assert 0.25 < len(called) / len(steps) < 0.35
    for line in called:  # a+b=?r:left, r the exact sum
        (a, b), result = line.split("=")[0].split("+"), line.split(CALL)[1].split(":")[0]
        assert int(result) == (int(a) + int(b)) % 10
    # without slips the worked answer is right, called steps or not
    for problem in problems[:50]:
        text = solution_with_calls(problem, noise=0.0, call_rate=0.5, rng=rng)
        assert chain_reward(text, problem.answer) == 1.0


def test_the_calculator_answers_the_step_its_call_closes(tokenizer):
    calculator = Calculator(tokenizer)
    assert calculator.closing_token_id == tokenizer.convert_tokens_to_ids(CALL)
    prompt = ids(tokenizer, "Q:7+3x2=")
    call = Trajectory(prompt, 0, 0)
    call.extend(ids(tokenizer, "2;7+3=?"), torch.zeros(7), version=0)
    output = calculator.run(call)
    assert tokenizer.decode(output.token_ids) == "0" and not output.error
    stray = Trajectory(prompt, 1, 0)
    stray.extend(ids(tokenizer, "2;?"), torch.zeros(3), version=0)
    assert calculator.run(stray).token_ids == [] and calculator.run(stray).error


def test_a_trajectory_without_tool_output_made_no_call():
    assert calls_made(Trajectory(torch.tensor([1]), 0, 0)) == 0


# -- training on it: the shipped tool model (rollverify/tiny/build.py --task chain_tool) --------

TOOL = {"model.path": "models/tiny-qwen3-chain-tool", "task.name": "chain_tool"}
# every partial method; make test trains partial and rollverify, the rest are the matrix tier
# (docs/testing.md; make test trains every method on the chain task, tests/test_train.py)
PARTIAL = [
    name if name in ("partial", "rollverify") else pytest.param(name, marks=pytest.mark.matrix)
    for name, method in METHODS.items()
    if method.partial
]


def tool_outputs(trajectory) -> int:
    return 0 if trajectory.policy is None else int((~trajectory.policy).sum())


@pytest.mark.parametrize("method", PARTIAL)
def test_every_partial_method_trains_the_tool_task(tmp_path, method):
    summary = train(tiny(tmp_path, method, **TOOL))
    metrics = history(summary)
    for name in ("tool_calls", "tool_errors", "tool_timeouts", "tool_seconds", "tool_calls_mean"):
        assert sorted(metrics[name]) == [1, 2, 3], name
    assert sum(metrics["tool_calls"].values()) > 0, "the base model calls its calculator"
    assert set(metrics["tool_timeouts"].values()) == {0.0}
    # the trained completions hold the calculator's answers: 1 token per call
    assert max(metrics["tool_calls_mean"].values()) > 0
    assert sorted(metrics["eval_accuracy"]) == [0, 3]
    resumed = metrics["resumed"]
    assert resumed[2] + resumed[3] > 0, "partial methods resume cached trajectories"


def test_a_steps_tool_calls_are_its_rollouts_and_the_evaluations_are_apart(tmp_path):
    """grpo trains every trajectory its rollout made, so the calls a step counts are those in
    its batch (4 completions); the evaluation before step 1 calls too, counted apart."""
    metrics = history(train(tiny(tmp_path, "grpo", **TOOL)))
    for step in (1, 2, 3):
        assert metrics["tool_calls"][step] == 4 * metrics["tool_calls_mean"][step], step
    assert sum(metrics["tool_calls"].values()) > 0


def test_rollverify_verifies_cached_trajectories_that_hold_tool_output(tmp_path):
    """Paused trajectories keep their calls' outputs; after the update verification scores
    their policy tokens only (tests/test_tool_output.py has the rule's vectors), and the run
    goes on from a checkpoint whose cache holds them, as far as a run that never stopped."""
    settings = TOOL | {"train.checkpoint_every": 1}
    whole = train(tiny(tmp_path / "whole", "rollverify", **settings))
    metrics = history(whole)
    assert max(metrics["cache_tokens_verified"].values()) > 0
    with_output = [t for t in cached(whole.run_dir, 2) if tool_outputs(t)]
    assert with_output, "the cache of step 2 holds paused trajectories with tool output"
    # every output token follows a policy token '?' and was not sampled: no behavior log-prob
    tokenizer = build_char_tokenizer(TOOL_CHARACTERS)
    call = tokenizer.convert_tokens_to_ids(CALL)
    for trajectory in with_output:
        ids, policy = trajectory.token_ids, trajectory.policy
        outputs = (~policy).nonzero().flatten()
        assert all(int(ids[i - 1]) == call and bool(policy[i - 1]) for i in outputs)
        assert torch.all(trajectory.behavior_logprobs[outputs] == 0)

    short = train(tiny(tmp_path / "short", "rollverify", **settings | {"train.steps": 2}))
    resumed = resume(short.run_dir, {"train.steps": 3})
    ours, theirs = (latest(Path(r.run_dir) / "checkpoints") for r in (resumed, whole))
    assert ours.step == theirs.step == 3
    for name, tensor in theirs.tensors["model"].items():
        assert torch.equal(ours.tensors["model"][name], tensor), name
    assert ours.state["cache"] == theirs.state["cache"]


def test_a_run_killed_with_a_tool_call_pending_resumes_to_the_run_that_never_stopped(tmp_path):
    """SIGKILLed as step 2's first calculator call starts, resumed from the step-1 checkpoint:
    the call is neither lost nor answered twice, and the run ends bit for bit where the run
    that never stopped ends (its cache of paused trajectories, tool output included, too)."""
    settings = TOOL | {"train.method": "rollverify", "train.checkpoint_every": 1}
    config = tiny_file(tmp_path / "tool.yaml", **settings)
    whole = train(load_config(config, {"output": str(tmp_path / "whole")}))
    output = tmp_path / "runs"
    args = ("--config", str(config), "--output", str(output))
    killed = run_cli("train", *args, kill_at="tool-call:2")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (run_dir,) = output.glob("rollverify-*")
    assert latest(run_dir / "checkpoints").step == 1
    final = run_cli("resume", str(run_dir))
    assert final.returncode == 0, final.stderr[-2000:]
    ours, theirs = (latest(Path(d) / "checkpoints") for d in (run_dir, whole.run_dir))
    assert ours.step == theirs.step == 3
    assert_same_weights_and_cache(ours, theirs)
    assert any(tool_outputs(t) for t in cached(run_dir)), "the cache holds tool output"


@pytest.mark.parametrize("lockstep", [True, False])
def test_asynchronous_training_runs_tool_calls_and_a_stop_loses_none(tmp_path, lockstep):
    """rollout.mode async with the calculator: calls run between updates landing, a SIGTERM
    after step 2 checkpoints the sequences in flight with their calls answered (the engine's
    pause waits for a pending call: tests/test_tool_calls.py), and `resume` ends the run; in
    lock-step where the run that never stopped ends, bit for bit."""
    settings = TOOL | {"rollout.mode": "async", "rollout.eta": 2, "rollout.lockstep": lockstep}
    settings |= {"train.steps": 4, "train.checkpoint_every": 4}
    run_dir = stopped_after(tiny(tmp_path / "stopped", "rollverify", **settings), step=2)
    assert groups_in_play(latest(run_dir / "checkpoints"), group_size=2)
    summary = resume(run_dir)
    metrics = history(summary)
    assert sorted(metrics["tool_calls"]) == [1, 2, 3, 4]
    assert sum(metrics["tool_calls"].values()) > 0
    assert max(metrics["staleness_max"].values()) <= 2
    if lockstep:
        reference = train(tiny(tmp_path / "reference", "rollverify", **settings))
        ours, theirs = (latest(Path(r.run_dir) / "checkpoints") for r in (summary, reference))
        assert ours.step == theirs.step == 4
        assert_same_weights_and_cache(ours, theirs)
        assert history(reference)["tool_calls"] == metrics["tool_calls"]
