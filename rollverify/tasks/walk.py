"""A chain whose addends the policy chooses: n correct additions modulo 10 from a start.

    prompt    Q:7x4=                         from 7, four steps
    response  4;5=2:3;8=0:2;1=1:1;2=3:0#3    n; then digit=next state:steps left; #end

The chain task's long tail (n ~ n^-alpha) and counted lines, with one difference: the digit
added at each step is the policy's to choose, any of 1..9. Many responses are right, as many
phrasings of one solution are for a language model, so a policy has entropy where the choice
is free (ln 9 nats a step when uniform) and must be exact everywhere else. A line is the chain
task's without the restated state ("5=2:3" for "7+5=2:3"): each step is then 6-7 tokens, one of
them free, where the chain's 8-9 diluted the free digit's entropy to ~0.35 nats a token in our
trials (docs/results.md). The verifier reads the whole chain: the restated n, every line's sum
modulo 10 (from the last line's state, the start for the first), its counter, and the answer
where the chain ends; a response that only writes an answer scores 0.

Why this task (docs/results.md, "A setting where stale tokens can matter"): on the chain task
every token but a slip is determined, so the warmed policy's mean token entropy is ~0.1 nats
and a stale token is almost the token the current policy would choose. Here the free digits
keep the starting policy's entropy high, and RL moves it (towards digits the model adds
reliably), so a token sampled versions ago can be one the current policy would rarely choose:
the regime of the paper's Qwen3-8B runs. No 0: adding it is a copy, a shortcut that would end
the learning in a few steps. No target to reach: a tiny model did not learn the subtraction a
landing step needs in our trials (docs/results.md).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from rollverify.tasks.chain import ChainTask, ChainTaskConfig, chain_length

RESPONSE = re.compile(r"(\d+);(.*)#(\d)")
DIGITS = range(1, 10)  # what a step may add
LINE = re.compile(r"(\d)=(\d):(\d+)")


@dataclass(frozen=True)
class WalkProblem:
    start: int  # 0..9
    steps: int  # n >= 1

    @classmethod
    def draw(cls, rng: random.Random, config: ChainTaskConfig) -> WalkProblem:
        n = chain_length(rng, config)
        return cls(start=rng.randint(0, 9), steps=n)

    @property
    def prompt(self) -> str:
        return f"Q:{self.start}x{self.steps}="

    @property
    def answer(self) -> str:
        """What the verifier needs of the problem (walk_reward)."""
        return f"{self.start}x{self.steps}"

    def solution(self, noise: float = 0.0, rng: random.Random | None = None) -> str:
        """A worked response, its digits drawn uniformly; with `noise`, each new state is
        wrong with that probability (carried on consistently)."""
        rng = rng or random.Random(0)
        state, lines = self.start, []
        for left in range(self.steps - 1, -1, -1):
            digit = rng.choice(DIGITS)
            result = (state + digit) % 10
            if noise and rng.random() < noise:
                result = (result + rng.randint(1, 9)) % 10  # a slip
            lines.append(f"{digit}={result}:{left}")
            state = result
        return ";".join([str(self.steps), *lines]) + f"#{state}"


def walk_reward(response: str, answer: str) -> float:
    """1.0 when the response is a correct walk for `answer` ("start x n"), else 0.0."""
    start, steps = answer.split("x")
    found = RESPONSE.fullmatch(response.strip())
    if found is None or found.group(1) != steps:
        return 0.0
    lines = found.group(2).split(";")
    if len(lines) != int(steps):
        return 0.0
    state = int(start)
    for index, line in enumerate(lines):
        step = LINE.fullmatch(line)
        if step is None:
            return 0.0
        digit, after, left = step.groups()
        if int(digit) not in DIGITS:
            return 0.0
        if int(after) != (state + int(digit)) % 10:  # from where the last line ended
            return 0.0
        if left != str(len(lines) - 1 - index):
            return 0.0
        state = int(after)
    return 1.0 if found.group(3) == str(state) else 0.0  # the answer: where the chain ends


class WalkTask(ChainTask):
    """The chain task's stream and eval sets, of walks (rollverify.tasks.base.Task)."""

    problem = WalkProblem

    def reward(self, response: str, answer: str) -> float:
        return walk_reward(response, answer)
