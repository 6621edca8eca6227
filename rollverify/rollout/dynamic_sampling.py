"""DAPO's dynamic sampling (rollout.dynamic_sampling_max_drops).

A group whose G rewards all tie (every answer right, or every one wrong) has advantage 0 for
every sample: GRPO learns nothing from it, yet it takes a place in the batch. With dynamic
sampling such a group is dropped as soon as it completes and a new prompt takes its place, so
the step trains on B groups that carry a gradient. The tie is judged on the task's reward (its
accuracy, as DAPO filters), before any length shaping.

DAPO's recipe (verl's max_num_gen_batches) gives up after a number of generation batches; here
a step drops at most `max_drops` groups, then trains on groups as they come, whatever their
rewards: a hard dataset slows a run down but never stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rollverify.rollout.trajectory import Trajectory

Scorer = Callable[[Sequence[Trajectory], str], list[float]]  # a group's rewards, given its answer


def all_tied(rewards: Sequence[float]) -> bool:
    """No reward differs from the others: every advantage of the group is 0."""
    return max(rewards) == min(rewards)


def tie_filter(score: Scorer) -> Callable[[Sequence[Trajectory], str], bool]:
    """collect's `drop_group`: true for a complete group whose rewards all tie."""
    return lambda group, answer: all_tied(score(group, answer))
