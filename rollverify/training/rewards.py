"""The rewards of a rollout: the task's verifier on each completion, decoded as TRL decodes
it, plus DAPO's soft overlong punishment (rollout.overlong_buffer)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rollverify.config import RolloutConfig
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.base import Task, score_all
from rollverify.tasks.rewards.checks import CheckCounts
from rollverify.training.guards import require_finite


class Rewards:
    def __init__(self, task: Task, tokenizer: Any, rollout: RolloutConfig) -> None:
        """tokenizer: the trainer's (TRL's processing_class), so that the texts are TRL's."""
        self.task, self.tokenizer = task, tokenizer
        self.overlong = overlong_punishment(rollout)  # DAPO's length shaping, or None

    def of_batch(self, completion_ids: list[list[int]], answers: list[str]) -> list[float]:
        """What a rollout batch is trained on: the verifier's, shaped by the overlong
        punishment; refused if any is not finite."""
        rewards = self.of_task(completion_ids, answers)
        if self.overlong is not None:
            rewards = [r + p for r, p in zip(rewards, self.overlong(completion_ids), strict=True)]
        require_finite("rewards", torch.tensor(rewards, dtype=torch.float64))
        return rewards

    def of_group(self, group: list[Trajectory], answer: str) -> list[float]:
        """A complete group's task rewards, for dynamic sampling."""
        return self.of_task([t.token_ids.tolist() for t in group], [answer] * len(group))

    def checks(self) -> CheckCounts | None:
        """What the task's checks caught since the last call (a task that runs programs),
        else None."""
        checks = getattr(self.task, "reward_checks", None)
        return checks.take() if checks is not None else None

    def of_task(self, completion_ids: list[list[int]], answers: list[str]) -> list[float]:
        """The task's verifier on completions decoded as TRL decodes them."""
        texts = self.tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        return score_all(self.task, self.task.reward, texts, answers)


def overlong_punishment(rollout: RolloutConfig) -> Callable[[list[list[int]]], list[float]] | None:
    """TRL's DAPO soft overlong punishment for rollout.overlong_buffer (None: off)."""
    if not rollout.overlong_buffer:
        return None
    from trl.rewards import get_soft_overlong_punishment

    return get_soft_overlong_punishment(rollout.max_new_tokens, rollout.overlong_buffer)
