"""A chain whose steps the policy chooses: reach a target digit in exactly n additions.

    prompt    Q:7>3x4=                               from 7 to 3 in four steps
    response  4;7+5=2:3;2+8=0:2;0+1=1:1;1+2=3:0#3    n; then state+digit=next:steps left; #end

The chain task's format and long tail (n ~ n^-alpha), with one difference: the digit added at
each step is the policy's to choose, any of 0..9, except that the last must land on the
target. Many responses are right, as many phrasings of one solution are for a language model,
so a policy has entropy where the choice is free (ln 10 nats a step when uniform) and must be
exact everywhere else. The verifier reads the whole chain: the restated n, every line's state
(the previous result), its sum modulo 10 and its counter, and the end on the target; a
response that only writes the target scores 0.

Why this task (docs/results.md, "A setting where stale tokens can matter"): on the chain task
every token but a slip is determined, so the warmed policy's mean token entropy is ~0.1 nats
and a stale token is almost the token the current policy would choose. Here the free digits
keep the starting policy's entropy high, and RL moves it (towards digits the model adds
reliably, and a landing it gets right), so a token sampled versions ago can be one the current
policy would rarely choose: the regime of the paper's Qwen3-8B runs.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from rollverify.tasks.chain import ChainTask, ChainTaskConfig, chain_length

RESPONSE = re.compile(r"(\d+);(.*)#(\d)")
LINE = re.compile(r"(\d)\+(\d)=(\d):(\d+)")


@dataclass(frozen=True)
class WalkProblem:
    start: int  # 0..9
    target: int  # 0..9
    steps: int  # n >= 1

    @classmethod
    def draw(cls, rng: random.Random, config: ChainTaskConfig) -> WalkProblem:
        return cls(
            start=rng.randint(0, 9), target=rng.randint(0, 9), steps=chain_length(rng, config)
        )

    @property
    def prompt(self) -> str:
        return f"Q:{self.start}>{self.target}x{self.steps}="

    @property
    def answer(self) -> str:
        """What the verifier needs of the problem (walk_reward)."""
        return f"{self.start}>{self.target}x{self.steps}"

    def solution(self, noise: float = 0.0, rng: random.Random | None = None) -> str:
        """A worked response: free digits drawn uniformly, the last one landing on the target;
        with `noise`, each new state is wrong with that probability (carried on consistently)."""
        rng = rng or random.Random(0)
        state, lines = self.start, []
        for left in range(self.steps - 1, -1, -1):
            digit = rng.randint(0, 9) if left else (self.target - state) % 10
            result = (state + digit) % 10
            if noise and rng.random() < noise:
                result = (result + rng.randint(1, 9)) % 10  # a slip
            lines.append(f"{state}+{digit}={result}:{left}")
            state = result
        return ";".join([str(self.steps), *lines]) + f"#{state}"


def walk_reward(response: str, answer: str) -> float:
    """1.0 when the response is a correct walk for `answer` ("start>target x n"), else 0.0."""
    start, rest = answer.split(">")
    target, steps = rest.split("x")
    found = RESPONSE.fullmatch(response.strip())
    if found is None or found.group(1) != steps or found.group(3) != target:
        return 0.0
    lines = found.group(2).split(";")
    if len(lines) != int(steps):
        return 0.0
    state = int(start)
    for index, line in enumerate(lines):
        step = LINE.fullmatch(line)
        if step is None:
            return 0.0
        before, digit, after, left = step.groups()
        if int(before) != state:  # each line starts where the last one ended
            return 0.0
        if int(after) != (int(before) + int(digit)) % 10:
            return 0.0
        if left != str(len(lines) - 1 - index):
            return 0.0
        state = int(after)
    return 1.0 if state == int(target) else 0.0


class WalkTask(ChainTask):
    """The chain task's stream and eval sets, of walks (rollverify.tasks.base.Task)."""

    problem = WalkProblem

    def reward(self, response: str, answer: str) -> float:
        return walk_reward(response, answer)
