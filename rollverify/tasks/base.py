"""What a task gives the training loop: a prompt stream, fixed eval sets, and a reward."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import torch

from rollverify.rollout.schedules import PromptGroup


@dataclass(frozen=True)
class EvalProblem:
    prompt_ids: torch.Tensor  # long [P]
    answer: str


class Task(Protocol):
    def next_group(self) -> PromptGroup:
        """The next training prompt (a PromptSource)."""

    def eval_problems(self) -> list[EvalProblem]:
        """The held-out set (the first, if there are several): the same for every run."""

    def eval_sets(self) -> dict[str, list[EvalProblem]]:
        """Every held-out set by name (task.eval_sets / task.eval_files), in config order."""

    def reward(self, response: str, answer: str) -> float:
        """1.0 for a correct final answer, else 0.0."""

    def reward_tokens(self, token_ids: list[int], answer: str) -> float:
        """The reward of a response given as token ids (decoded without special tokens)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def score_all(task: Task, score: Callable[..., float], *columns: Sequence) -> list[float]:
    """`score` over the columns' rows, in order; `task.reward_workers` at a time where the task
    says so (a code task's sandboxed tests: ~0.2 s each), else one after another."""
    workers = getattr(task, "reward_workers", 1)
    if workers <= 1:
        return [score(*row) for row in zip(*columns, strict=True)]
    with ThreadPoolExecutor(workers, thread_name_prefix="reward") as pool:
        return list(pool.map(score, *columns))
