"""Held-out evaluation, as the paper reports it: per eval set, avg@k (the mean reward of k
samples per problem) and pass@k (the share of problems with at least one sample scored a full
1.0); the run's `eval_accuracy` is the mean of avg@k over the sets, each set weighing the same.

All sets' problems x k samples go through the engine at once (its slots full), sampled with a
fixed seed, so every evaluation of every run draws the same random numbers."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from rollverify.rollout.engines.protocol import RolloutEngine
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.base import EvalProblem, Task, score_all


@dataclass(frozen=True)
class SetScore:
    avg_at_k: float
    pass_at_k: float
    problems: int


@dataclass(frozen=True)
class Evaluation:
    sets: dict[str, SetScore]  # in the config's order

    @property
    def accuracy(self) -> float:
        """The mean over sets of avg@k (`eval_accuracy`)."""
        return statistics.fmean(score.avg_at_k for score in self.sets.values())


def evaluate_sets(
    engine: RolloutEngine,
    task: Task,
    sets: dict[str, list[EvalProblem]],
    samples: int,
    seed: int,
) -> Evaluation:
    """Score every set with `samples` responses per problem. The engine must be idle."""
    problems = [(name, p) for name, problems in sets.items() for p in problems]
    trajectories = [
        Trajectory(p.prompt_ids, -1 - i, s)
        for i, (_, p) in enumerate(problems)
        for s in range(samples)
    ]
    with engine.seeded(seed):
        engine.submit(trajectories)
        while engine.has_work:
            engine.poll()
    rewards = score_all(
        task,
        task.reward_tokens,
        [t.token_ids.tolist() for t in trajectories],
        [problems[-1 - t.group_id][1].answer for t in trajectories],
    )
    per_problem: dict[str, list[list[float]]] = {name: [] for name in sets}
    for index, (name, _) in enumerate(problems):
        per_problem[name].append(rewards[index * samples : (index + 1) * samples])
    return Evaluation(
        {
            name: SetScore(
                avg_at_k=statistics.fmean(r for problem in scored for r in problem),
                pass_at_k=statistics.fmean(float(max(problem) >= 1.0) for problem in scored),
                problems=len(scored),
            )
            for name, scored in per_problem.items()
        }
    )


def evaluate(
    engine: RolloutEngine, task: Task, problems: list[EvalProblem], samples: int, seed: int
) -> float:
    """avg@k of one set of problems."""
    return evaluate_sets(engine, task, {"eval": problems}, samples, seed).accuracy
