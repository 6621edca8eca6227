"""Rollout schedules: synchronous (grpo) and partial rollout, over any RolloutEngine.

    synchronous  start B groups (after whatever is cached), wait until every trajectory ends.
    partial      resume the cache first, keep the slots full with new groups, and once B groups
                 are complete (all G samples finished) pause what is unfinished into the cache.

With dynamic sampling (rollverify/rollout/dynamic_sampling.py) either schedule drops a group that
completes with tied rewards and starts a new prompt in its place, up to a number per step.
With a staleness cap (rollverify/rollout/staleness_cap.py) a group with a cached trajectory too many
versions old is dropped before the cache resumes, and its prompt starts again.

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

from rollverify.rollout.engines.protocol import EngineLost, RolloutEngine
from rollverify.rollout.staleness_cap import split_stale
from rollverify.rollout.trajectory import Trajectory, TrajectoryCache


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
    # The step in progress (a stopped one) so far: groups dynamic sampling dropped, cached
    # trajectories the staleness cap dropped, and their tokens.
    dropped: int = 0
    dropped_stale: int = 0
    dropped_stale_tokens: int = 0

    def state_dict(self) -> dict:
        """The cache as tensors (token ids, behavior log-probs, versions) and JSON records,
        the answers of groups in play (JSON keys are strings), the step's drops so far."""
        tensors, records = self.cache.to_tensors()
        answers = {str(group): answer for group, answer in self.answers.items()}
        cache = {"tensors": tensors, "records": records}
        return {
            "cache": cache,
            "answers": answers,
            "dropped": self.dropped,
            "dropped_stale": self.dropped_stale,
            "dropped_stale_tokens": self.dropped_stale_tokens,
        }

    def load_state_dict(self, state: dict) -> None:
        cache = state["cache"]
        self.cache = TrajectoryCache.from_tensors(cache["tensors"], cache["records"])
        self.answers = {int(group): answer for group, answer in state["answers"].items()}
        self.dropped = state.get("dropped", 0)  # (checkpoints from before dynamic sampling)
        self.dropped_stale = state.get("dropped_stale", 0)  # (... before the staleness cap)
        self.dropped_stale_tokens = state.get("dropped_stale_tokens", 0)


class StopRequested(Exception):
    """should_stop() turned true: collect pauses everything into the cache."""


class RolloutInterrupted(Exception):
    """A stop was requested mid-rollout, or the engine was lost (`lost`: EngineLost, which the
    run stops with once checkpointed); everything generated so far is in the cache."""

    def __init__(
        self,
        seconds: float,
        tokens_generated: int,
        tokens_regenerated: int,
        lost: EngineLost | None = None,
    ) -> None:
        super().__init__(str(lost) if lost else "rollout interrupted by a stop request")
        self.seconds, self.lost = seconds, lost
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
    dropped_groups: int = 0  # complete groups dynamic sampling dropped (tied rewards)
    dropped_tokens: int = 0  # their response tokens
    dropped_stale: int = 0  # cached trajectories the staleness cap dropped (whole groups)
    dropped_stale_tokens: int = 0  # their response tokens

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
    drop_group: Callable[[list[Trajectory], str], bool] | None = None,
    max_drops: int = 0,
    max_staleness: int | None = None,
) -> RolloutResult:
    """Run one step's rollout; see the module docstring for the two schedules.

    When `should_stop()` turns true, everything in flight is paused into the cache (finished
    trajectories too, waiting for their groups) and RolloutInterrupted is raised: a rollout
    can stop at any time and lose nothing. `drop_group(group, answer)` (dynamic sampling)
    drops a complete group, replaced by a new one, up to `max_drops` times in the step. With
    `max_staleness` (None: off) a group with a cached trajectory more than that many versions
    behind `engine.version` is dropped whole and its prompt started again (same group id)."""
    start, tokens_before = time.perf_counter(), engine.stats.tokens_generated
    regenerated_before = engine.stats.tokens_regenerated
    cached = state.cache.take_all()
    oversized = [t.key for t in cached if t.sample_index >= group_size]
    if oversized:
        state.cache = TrajectoryCache(cached)  # leave the cache as it was
        raise ValueError(f"cached trajectories {oversized[:3]} do not fit group_size={group_size}")
    stale: list[Trajectory] = []  # every cached member of the groups the staleness cap drops
    if max_staleness is not None:
        cached, stale = split_stale(cached, engine.version, max_staleness)
        state.dropped_stale += len(stale)
        state.dropped_stale_tokens += sum(len(t) for t in stale)
    finished: dict[int, list[Trajectory]] = defaultdict(list)
    complete: set[int] = set()  # groups whose G samples have all finished
    in_play: set[int] = set()
    dropped_tokens = 0  # of the groups dynamic sampling drops in this call

    def finish(trajectory: Trajectory) -> None:
        nonlocal dropped_tokens
        group = trajectory.group_id
        members = finished[group]
        members.append(trajectory)
        if len(members) < group_size:
            return
        dropping = drop_group is not None and state.dropped < max_drops
        if dropping and drop_group(members, state.answers[group]):
            state.dropped += 1
            dropped_tokens += sum(len(t) for t in finished.pop(group))
            state.answers.pop(group)
            in_play.discard(group)  # a new group takes its place
            return
        complete.add(group)

    for trajectory in cached:
        in_play.add(trajectory.group_id)
        if trajectory.finished:
            finish(trajectory)

    def start_group(group: PromptGroup | None = None) -> None:
        group = group or source.next_group()
        state.answers[group.group_id] = group.answer
        in_play.add(group.group_id)
        engine.submit(group.samples(group_size))

    resumed = [t for t in cached if not t.finished]
    try:  # a stop request, or the engine lost: everything goes back to the cache
        engine.submit(resumed)
        prompts = {t.group_id: t.prompt_ids for t in stale}
        for group, prompt_ids in sorted(prompts.items()):  # restarted: after the resumed ones
            start_group(PromptGroup(group, prompt_ids, state.answers[group]))

        limit = max_inflight_groups if partial else batch_groups
        while len(complete) < batch_groups or (engine.has_work and not partial):
            while len(in_play) < batch_groups:  # enough groups for one batch, whatever the schedule
                start_group()
            if partial:
                while engine.idle_slots() > 0 and (limit is None or len(in_play) < limit):
                    start_group()
            if not engine.has_work:  # only reachable if groups went missing: fail, never hang
                raise RuntimeError(
                    f"rollout stalled: {len(complete)} of {batch_groups} "
                    "groups complete and nothing left to generate"
                )
            if should_stop():
                raise StopRequested
            for trajectory in engine.poll():
                finish(trajectory)
    except (StopRequested, EngineLost) as stopped:  # paused into the cache: nothing is lost
        for trajectory in [*engine.pause(), *(t for m in finished.values() for t in m)]:
            state.cache.add(trajectory)
        raise RolloutInterrupted(
            time.perf_counter() - start,
            engine.stats.tokens_generated - tokens_before,
            engine.stats.tokens_regenerated - regenerated_before,
            lost=stopped if isinstance(stopped, EngineLost) else None,
        ) from None

    paused = engine.pause() if partial else []
    chosen = sorted(complete)[:batch_groups]
    groups = [sorted(finished.pop(g), key=lambda t: t.sample_index) for g in chosen]
    for trajectory in [*paused, *(t for members in finished.values() for t in members)]:
        state.cache.add(trajectory)  # unfinished, or finished and waiting for its group
    dropped, state.dropped = state.dropped, 0  # (the next step drops afresh)
    dropped_stale, state.dropped_stale = state.dropped_stale, 0
    dropped_stale_tokens, state.dropped_stale_tokens = state.dropped_stale_tokens, 0
    return RolloutResult(
        groups=groups,
        answers=[state.answers.pop(g) for g in chosen],
        seconds=time.perf_counter() - start,
        resumed=len(resumed),
        paused=sum(not t.finished for t in paused),  # (one that finished on the way waits)
        tokens_generated=engine.stats.tokens_generated - tokens_before,
        tokens_regenerated=engine.stats.tokens_regenerated - regenerated_before,
        dropped_groups=dropped,
        dropped_tokens=dropped_tokens,
        dropped_stale=dropped_stale,
        dropped_stale_tokens=dropped_stale_tokens,
    )
