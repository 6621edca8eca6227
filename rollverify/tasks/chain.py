"""The embedded default task: a counted chain of additions modulo 10, of long-tail length.

    prompt    Q:7+3x4=                               start 7, add 3, four times
    response  4;7+3=0:3;0+3=3:2;3+3=6:1;6+3=9:0#9    n; then state+add=next:steps left; #answer

Every line needs only the line before it: copy its result and the addend, add modulo 10,
decrement its counter. The response first restates n, so the first counter is a decrement
like every other (measured: fetching n from the prompt and decrementing it in one go was the
base model's most common error). The counter ends the line, so the choice between ";" (go
on) and "#" (answer) reads the character just written (":0" vs ":10"). Nothing has to be
fetched from far back, so a ~0.6M-parameter model can learn it on a CPU; the number of steps n
is heavy-tailed (P(n) ~ n^-alpha), so response lengths have the long tail that makes partial
rollout pay.
The reward is exact match of the final answer. Demonstrations for the base model carry step
noise (a wrong state with probability `noise` per step, followed consistently): the base
model samples such slips, and RL has something real to remove.

Why this and not a sum of terms: in our trials (no result file kept), tiny models failed at
fetching the i-th term of a long prompt; a chain whose every step needs only the step before
it is learnable on a CPU.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import torch

from rollverify.rollout.schedules import PromptGroup
from rollverify.tasks.base import EvalProblem

ANSWER_PATTERN = re.compile(r"#(\d)$")


@dataclass(frozen=True)
class ChainTaskConfig:
    """The task's distribution; the defaults are what the shipped base model was trained on."""

    max_steps: int = 32  # n is drawn from 1..max_steps
    alpha: float = 1.3  # P(n) ~ n^-alpha: larger alpha, lighter tail


@dataclass(frozen=True)
class ChainProblem:
    start: int  # s0 in 0..9
    add: int  # a in 1..9
    steps: int  # n >= 1

    @classmethod
    def draw(cls, rng: random.Random, config: ChainTaskConfig) -> ChainProblem:
        n = chain_length(rng, config)
        return cls(start=rng.randint(0, 9), add=rng.randint(1, 9), steps=n)

    @property
    def prompt(self) -> str:
        return f"Q:{self.start}+{self.add}x{self.steps}="

    @property
    def answer(self) -> str:
        return str((self.start + self.add * self.steps) % 10)

    def solution(self, noise: float = 0.0, rng: random.Random | None = None) -> str:
        """The worked response; with `noise`, each new state is wrong with that probability."""
        state, lines = self.start, []
        for left in range(self.steps - 1, -1, -1):
            result = (state + self.add) % 10
            if noise and rng is not None and rng.random() < noise:
                result = (result + rng.randint(1, 9)) % 10  # a slip, carried on consistently
            lines.append(f"{state}+{self.add}={result}:{left}")
            state = result
        return ";".join([str(self.steps), *lines]) + f"#{state}"


def chain_length(rng: random.Random, config: ChainTaskConfig) -> int:
    """n in 1..max_steps with P(n) ~ n^-alpha."""
    steps = range(1, config.max_steps + 1)
    return rng.choices(steps, weights=[n**-config.alpha for n in steps])[0]


def sample_problem(
    rng: random.Random, config: ChainTaskConfig = ChainTaskConfig(), kind: type = ChainProblem
):
    return kind.draw(rng, config)


def sample_problems(
    count: int, seed: int, config: ChainTaskConfig = ChainTaskConfig(), kind: type = ChainProblem
) -> list:
    rng = random.Random(seed)
    return [sample_problem(rng, config, kind) for _ in range(count)]


def chain_reward(response: str, answer: str) -> float:
    """1.0 when the response ends with `#<answer>` (its final answer), else 0.0."""
    match = ANSWER_PATTERN.search(response.strip())
    return 1.0 if match is not None and match.group(1) == answer else 0.0


class ChainTask:
    """Training stream and eval set of the chain task, tokenized (rollverify.tasks.base.Task)."""

    problem: type = ChainProblem  # what a prompt is (tasks/walk.py: a walk)

    def __init__(
        self,
        tokenizer,
        config: ChainTaskConfig,
        seed: int,
        eval_size: int,
        eval_seed: int,
        eval_sets: dict[str, int] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.config = config
        self.rng = random.Random(seed)
        self.next_group_id = 0
        self.eval_size, self.eval_seed = eval_size, eval_seed
        # name -> longest chain of its problems; by default one set, drawn as training is
        self.eval_longest = eval_sets or {"chain": config.max_steps}

    def _ids(self, text: str) -> torch.Tensor:
        return torch.tensor(self.tokenizer(text)["input_ids"], dtype=torch.long)

    def next_group(self) -> PromptGroup:
        problem = sample_problem(self.rng, self.config, self.problem)
        group = PromptGroup(self.next_group_id, self._ids(problem.prompt), problem.answer)
        self.next_group_id += 1
        return group

    def eval_problems(self) -> list[EvalProblem]:
        return next(iter(self.eval_sets().values()))

    def eval_sets(self) -> dict[str, list[EvalProblem]]:
        """Each set: eval_size problems of the training distribution cut at its longest chain
        (the same seed for every set: a harder set holds longer chains, not other starts)."""
        sets = {}
        for name, longest in self.eval_longest.items():
            config = ChainTaskConfig(max_steps=longest, alpha=self.config.alpha)
            problems = sample_problems(self.eval_size, self.eval_seed, config, self.problem)
            sets[name] = [EvalProblem(self._ids(p.prompt), p.answer) for p in problems]
        return sets

    def reward(self, response: str, answer: str) -> float:
        return chain_reward(response, answer)

    def reward_tokens(self, token_ids: list[int], answer: str) -> float:
        return self.reward(self.tokenizer.decode(token_ids, skip_special_tokens=True), answer)

    def state_dict(self) -> dict:
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss], "next_group_id": self.next_group_id}

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.next_group_id = state["next_group_id"]
