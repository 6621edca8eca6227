"""Real math (data/math, rllm's MATH / MATH-500 files) as a training task, for GPU configs.

Prompts go through the model's chat template and ask for a \\boxed{} answer; the reward is
math-verify equivalence with the reference (rollverify.rewards.math_answer).
"""

from __future__ import annotations

import random

import torch

from rollverify.data.math_problems import MathProblem, load_math_set
from rollverify.rewards.math_answer import math_answer_reward
from rollverify.rollout import PromptGroup
from rollverify.tasks.base import EvalProblem

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


class MathTask:
    def __init__(
        self, tokenizer, train_file: str, eval_file: str, seed: int, eval_size: int, eval_seed: int
    ) -> None:
        self.tokenizer = tokenizer
        self.train = load_math_set(train_file).problems
        self.eval = load_math_set(eval_file).problems
        if not self.train or not self.eval:
            raise ValueError(f"task: no usable problems in {train_file} or {eval_file}")
        self.seed, self.eval_size, self.eval_seed = seed, eval_size, eval_seed
        self.next_group_id = 0

    def _ids(self, problem: MathProblem) -> torch.Tensor:
        content = f"{problem.problem}\n\n{INSTRUCTION}"
        if getattr(self.tokenizer, "chat_template", None):
            # return_dict=True on every transformers version: 5.x returns a BatchEncoding (not
            # a dict) by default, which a dict check missed and torch.tensor cannot read.
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": content}],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )["input_ids"]
        else:
            ids = self.tokenizer(content)["input_ids"]
        return torch.tensor(ids, dtype=torch.long)

    def _problem(self, index: int) -> MathProblem:
        # Epoch e visits the training set in its own seeded order: resumable from the index alone.
        epoch, position = divmod(index, len(self.train))
        order = list(range(len(self.train)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return self.train[order[position]]

    def next_group(self) -> PromptGroup:
        problem = self._problem(self.next_group_id)
        group = PromptGroup(self.next_group_id, self._ids(problem), problem.answer)
        self.next_group_id += 1
        return group

    def eval_problems(self) -> list[EvalProblem]:
        chosen = random.Random(self.eval_seed).sample(
            self.eval, min(self.eval_size, len(self.eval))
        )
        return [EvalProblem(self._ids(p), p.answer) for p in chosen]

    def reward(self, response: str, answer: str) -> float:
        return math_answer_reward(response, answer)

    def reward_tokens(self, token_ids: list[int], answer: str) -> float:
        return self.reward(self.tokenizer.decode(token_ids, skip_special_tokens=True), answer)

    def state_dict(self) -> dict:
        return {"next_group_id": self.next_group_id}

    def load_state_dict(self, state: dict) -> None:
        self.next_group_id = state["next_group_id"]
