"""Rollout schedules: synchronous (grpo) and partial rollout, over any RolloutEngine.

    synchronous  start B groups (after whatever is cached), wait until every trajectory ends.
    partial      resume the cache first, keep the slots full with new groups, and once B groups
                 are complete (all G samples finished) pause what is unfinished into the cache.

Groups come from a PromptSource; the answers of groups still in play live in `RolloutState`
with the cache, so a checkpoint of the state is all that is needed to continue.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import torch

from rollverify.engines.protocol import RolloutEngine
from rollverify.trajectory import Trajectory, TrajectoryCache


@dataclass(frozen=True)
class PromptGroup:
    """One prompt to sample G responses for. prompt_ids: long [P]."""

    group_id: int
    prompt_ids: torch.Tensor
    answer: str

    def samples(self, group_size: int) -> list[Trajectory]:
        """The group's G trajectories, not yet generated."""
        return [Trajectory(self.prompt_ids, self.group_id, i) for i in range(group_size)]


class PromptSource(Protocol):
    def next_group(self) -> PromptGroup:
        """The next training prompt, with a fresh group id."""


@dataclass
class RolloutState:
    """What survives between steps: paused or waiting trajectories, and their groups' answers."""

    cache: TrajectoryCache = field(default_factory=TrajectoryCache)
    answers: dict[int, str] = field(default_factory=dict)

    def state_dict(self) -> dict:
        """The cache as tensors (token ids, behavior log-probs, versions) and JSON records,
        and the answers of groups in play (JSON keys are strings)."""
        tensors, records = self.cache.to_tensors()
        answers = {str(group): answer for group, answer in self.answers.items()}
        return {"cache": {"tensors": tensors, "records": records}, "answers": answers}

    def load_state_dict(self, state: dict) -> None:
        cache = state["cache"]
        self.cache = TrajectoryCache.from_tensors(cache["tensors"], cache["records"])
        self.answers = {int(group): answer for group, answer in state["answers"].items()}


class RolloutInterrupted(Exception):
    """A stop was requested mid-rollout; everything generated so far is in the cache."""

    def __init__(self, seconds: float, tokens_generated: int, tokens_regenerated: int) -> None:
        super().__init__("rollout interrupted by a stop request")
        self.seconds = seconds
        self.tokens_generated, self.tokens_regenerated = tokens_generated, tokens_regenerated


@dataclass
class RolloutResult:
    """B complete groups to train on, and what the rollout cost.

    groups: B lists of G finished trajectories (group ids ascending: oldest first)
    """

    groups: list[list[Trajectory]]
    answers: list[str]  # one per group
    seconds: float
    resumed: int  # cached trajectories resumed at the start
    paused: int  # unfinished trajectories paused into the cache at the end
    tokens_generated: int
    tokens_regenerated: int  # of those, tokens generated again after a truncation

    def trajectories(self) -> Iterator[Trajectory]:
        for group in self.groups:
            yield from group


def collect(
    engine: RolloutEngine,
    source: PromptSource,
    state: RolloutState,
    *,
    batch_groups: int,
    group_size: int,
    partial: bool,
    max_inflight_groups: int | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> RolloutResult:
    """Run one step's rollout; see the module docstring for the two schedules.

    When `should_stop()` turns true, everything in flight is paused into the cache (finished
    trajectories too, waiting for their groups) and RolloutInterrupted is raised: a rollout
    can stop at any time and lose nothing."""
    start, tokens_before = time.perf_counter(), engine.stats.tokens_generated
    regenerated_before = engine.stats.tokens_regenerated
    cached = state.cache.take_all()
    oversized = [t.key for t in cached if t.sample_index >= group_size]
    if oversized:
        state.cache = TrajectoryCache(cached)  # leave the cache as it was
        raise ValueError(f"cached trajectories {oversized[:3]} do not fit group_size={group_size}")
    finished: dict[int, list[Trajectory]] = defaultdict(list)
    complete: set[int] = set()  # groups whose G samples have all finished
    in_play: set[int] = set()

    def finish(trajectory: Trajectory) -> None:
        members = finished[trajectory.group_id]
        members.append(trajectory)
        if len(members) == group_size:
            complete.add(trajectory.group_id)

    for trajectory in cached:
        in_play.add(trajectory.group_id)
        if trajectory.finished:
            finish(trajectory)
    resumed = [t for t in cached if not t.finished]
    engine.submit(resumed)

    def start_group() -> None:
        group = source.next_group()
        state.answers[group.group_id] = group.answer
        in_play.add(group.group_id)
        engine.submit(group.samples(group_size))

    limit = max_inflight_groups if partial else batch_groups
    while len(in_play) < batch_groups:  # enough groups for one batch, whatever the schedule
        start_group()
    while engine.has_work if not partial else len(complete) < batch_groups:
        if partial:
            while engine.idle_slots() > 0 and (limit is None or len(in_play) < limit):
                start_group()
            if not engine.has_work:  # only reachable if groups went missing: fail, never hang
                raise RuntimeError(
                    f"rollout stalled: {len(complete)} of {batch_groups} "
                    "groups complete and nothing left to generate"
                )
        if should_stop():
            for trajectory in [*engine.pause(), *(t for m in finished.values() for t in m)]:
                state.cache.add(trajectory)
            raise RolloutInterrupted(
                time.perf_counter() - start,
                engine.stats.tokens_generated - tokens_before,
                engine.stats.tokens_regenerated - regenerated_before,
            )
        for trajectory in engine.poll():
            finish(trajectory)

    paused = engine.pause() if partial else []
    chosen = sorted(complete)[:batch_groups]
    groups = [sorted(finished.pop(g), key=lambda t: t.sample_index) for g in chosen]
    for trajectory in [*paused, *(t for members in finished.values() for t in members)]:
        state.cache.add(trajectory)  # unfinished, or finished and waiting for its group
    return RolloutResult(
        groups=groups,
        answers=[state.answers.pop(g) for g in chosen],
        seconds=time.perf_counter() - start,
        resumed=len(resumed),
        paused=sum(not t.finished for t in paused),  # (one that finished on the way waits)
        tokens_generated=engine.stats.tokens_generated - tokens_before,
        tokens_regenerated=engine.stats.tokens_regenerated - regenerated_before,
    )
