"""Held-out accuracy: sample the eval problems with the rollout engine, score them, average."""

from __future__ import annotations

from rollverify.engines.protocol import RolloutEngine
from rollverify.tasks.base import EvalProblem, Task
from rollverify.trajectory import Trajectory


def evaluate(
    engine: RolloutEngine, task: Task, problems: list[EvalProblem], samples: int, seed: int
) -> float:
    """Mean reward of `samples` responses per problem, sampled with a fixed seed (so every
    evaluation of every run draws the same random numbers). The engine must be idle."""
    trajectories = [
        Trajectory(p.prompt_ids, -1 - i, s) for i, p in enumerate(problems) for s in range(samples)
    ]
    with engine.seeded(seed):
        engine.submit(trajectories)
        while engine.has_work:
            engine.poll()
    answers = [p.answer for p in problems for _ in range(samples)]
    rewards = [
        task.reward_tokens(t.token_ids.tolist(), a)
        for t, a in zip(trajectories, answers, strict=True)
    ]
    return sum(rewards) / len(rewards)
