"""The embedded tool task: the chain task, where a step may call a calculator.

    prompt    Q:7+3x4=
    response  4;7+3=?0:3;0+3=3:2;3+3=?6:1;6+3=9:0#9

A step's result is either written by the policy (`0+3=3`) or asked of the calculator: the
policy writes `?`, the call's closing marker, the engine stops there, the calculator reads the
step `a+b=?` before it and its answer, one digit, is appended as a token the policy did not
sample (`7+3=?0`); the policy goes on from there. The calculator is always right; the policy's
own steps carry the demonstrations' slips. So calling pays: RL can learn to call more, up to
`task.max_tool_calls` per response (a call beyond it ends the response, unanswered, with no
answer: calling everywhere does not pay either).

The base model (rollverify/tiny/build.py --task chain_tool) is warmed on demonstrations that
call at a fixed rate. The calculator runs in the engine's thread (`inline`): it takes
microseconds, and a seeded run must give the same trajectories every time.
"""

from __future__ import annotations

import random
import re

from rollverify.rollout.tool_calls import ToolOutput
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.chain import ChainProblem, ChainTask

CALL = "?"  # closes a call: the policy asks for the step's result
CALLED_STEP = re.compile(r"(\d)\+(\d)=\?$")


def solution_with_calls(
    problem: ChainProblem, noise: float, call_rate: float, rng: random.Random
) -> str:
    """The worked response where each step calls the calculator with probability `call_rate`
    (its result then exact) and is otherwise worked out, wrong with probability `noise`."""
    state, lines = problem.start, []
    for left in range(problem.steps - 1, -1, -1):
        result = (state + problem.add) % 10
        if rng.random() < call_rate:
            lines.append(f"{state}+{problem.add}={CALL}{result}:{left}")
        else:
            if noise and rng.random() < noise:
                result = (result + rng.randint(1, 9)) % 10
            lines.append(f"{state}+{problem.add}={result}:{left}")
        state = result
    return ";".join([str(problem.steps), *lines]) + f"#{state}"


class Calculator:
    """The chain task's tool (rollout.tool_calls.ToolRunner): the sum modulo 10 of the step
    the call closes. A call that does not close a step (`?` elsewhere) is an error, answered
    with nothing."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.closing_token_id = tokenizer.convert_tokens_to_ids(CALL)
        self.inline = True  # microseconds: in the engine's thread, deterministically

    def run(self, trajectory: Trajectory) -> ToolOutput:
        text = self.tokenizer.decode(trajectory.token_ids.tolist(), skip_special_tokens=True)
        step = CALLED_STEP.search(text)
        if step is None:
            return ToolOutput([], error=True)
        result = (int(step.group(1)) + int(step.group(2))) % 10
        return ToolOutput(self.tokenizer(str(result))["input_ids"])


class ChainToolTask(ChainTask):
    """The chain task (same prompts, eval sets and reward) with its calculator."""

    def tool_runner(self) -> Calculator:
        return Calculator(self.tokenizer)
