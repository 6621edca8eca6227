"""Asynchronous rollout: the engines never pause for the trainer.

    async   keep the slots full with new groups as the staleness bound admits them
            (rollverify/core/staleness_bound.py); hand the trainer B complete groups as soon as
            they exist, the due ones first; weights reach the engine in flight, between two of
            its iterations, and every sequence continues under them.

Unlike `schedules.collect`, nothing is paused at the end of a batch: what is unfinished keeps
generating while the trainer trains, and finished trajectories wait in `AsyncState` for their
groups. The training loop runs it against its engine in lock-step (rollout.mode async: the
engine's polls and the trainer's steps take turns, so a run on the hf engine is reproducible and
resumes bit for bit; the vLLM sidecar generates on between them); `rvctl simulate` against the
simulated engine. `wait_for_weights` is how the caller says
that the engine, with nothing admissible and nothing running, waits for the trainer's next
weights.

A stop (`should_stop`) or a checkpoint takes the engine's work out into `AsyncState.in_flight`
(tokens, log-probs, versions kept); the next call submits it again first, in the same order.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from rollverify.core.staleness_bound import choose_batch, may_start
from rollverify.infra.kill_points import kill_point
from rollverify.rollout.engines.protocol import EngineLost, RolloutEngine
from rollverify.rollout.schedules import (
    PromptSource,
    RolloutInterrupted,
    RolloutResult,
    StopRequested,
)
from rollverify.rollout.trajectory import Trajectory, TrajectoryCache


@dataclass
class AsyncState:
    """Groups in play across batches: their start versions, finished members and answers."""

    start_versions: dict[int, int] = field(default_factory=dict)
    finished: dict[int, list[Trajectory]] = field(default_factory=lambda: defaultdict(list))
    answers: dict[int, str] = field(default_factory=dict)
    started: int = 0  # groups started in the run
    checked: dict[tuple[int, int], int] = field(default_factory=dict)  # key -> version verified
    in_flight: list[Trajectory] = field(default_factory=list)  # out of the engine, to go back
    # The engine's (generated, regenerated) token counts when the last batch was handed out:
    # a batch books what the engine did since, also between the calls (vLLM's sidecar runs on,
    # and an update in flight collects its tokens). A new process counts from its engine's
    # start, plus what a checkpoint kept as `uncounted`.
    counted: tuple[int, int] | None = None
    uncounted: tuple[int, int] = (0, 0)

    def take_out(self, engine: RolloutEngine) -> None:
        """Everything the engine runs or queues, out into `in_flight` (behind what is there); one
        that finished as it was paused (vLLM) waits for its group. The tokens generated since
        the last batch go into `uncounted` (a checkpoint keeps them for the next batch)."""
        for trajectory in engine.pause():
            if trajectory.finished:
                self.finished[trajectory.group_id].append(trajectory)
            else:
                self.in_flight.append(trajectory)
        self.uncounted = self.tokens_since_last_batch(engine, hand_out=True)

    def tokens_since_last_batch(self, engine: RolloutEngine, hand_out: bool = False):
        """(generated, regenerated) by the engine since the last hand-out; `hand_out`: counted
        again from now."""
        now = (engine.stats.tokens_generated, engine.stats.tokens_regenerated)
        before = now if self.counted is None else self.counted
        since = tuple(n - b + u for n, b, u in zip(now, before, self.uncounted, strict=True))
        if hand_out or self.counted is None:
            self.counted = now
        if hand_out:
            self.uncounted = (0, 0)
        return since

    def state_dict(self) -> dict:
        """As RolloutState's (rollout/schedules.py): its trajectories under "cache", in flight
        first, then the finished ones waiting for their groups; the rest under "async"."""
        waiting = [t for members in self.finished.values() for t in members]
        tensors, records = TrajectoryCache([*self.in_flight, *waiting]).to_tensors()
        return {
            "cache": {"tensors": tensors, "records": records},
            "answers": {str(g): a for g, a in self.answers.items()},
            "async": {
                "start_versions": {str(g): v for g, v in self.start_versions.items()},
                "started": self.started,
                "checked": [[*key, version] for key, version in self.checked.items()],
                "in_flight": len(self.in_flight),
                "uncounted": list(self.uncounted),
            },
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> AsyncState:
        cache, extra = state["cache"], state["async"]
        trajectories = list(TrajectoryCache.from_tensors(cache["tensors"], cache["records"]))
        count = extra["in_flight"]
        restored = cls(
            start_versions={int(g): v for g, v in extra["start_versions"].items()},
            answers={int(g): a for g, a in state["answers"].items()},
            started=extra["started"],
            checked={(g, i): v for g, i, v in extra["checked"]},
            in_flight=trajectories[:count],
            uncounted=tuple(extra.get("uncounted", (0, 0))),  # (not in the first checkpoints)
        )
        for trajectory in trajectories[count:]:
            restored.finished[trajectory.group_id].append(trajectory)
        return restored


def next_batch(
    engine: RolloutEngine,
    source: PromptSource,
    state: AsyncState,
    *,
    batch_groups: int,
    group_size: int,
    eta: int,
    version: int,
    wait_for_weights: Callable[[], bool],
    verify: Callable[[list[Trajectory], int], list[Trajectory]] | None = None,
    admit_eta: int | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    in_start_order: bool = False,
) -> RolloutResult:
    """The B groups the trainer trains at policy `version` (the staleness bound's choice),
    generating until they exist; the engine keeps everything else running.

    `verify(trajectories, version)` checks the chosen groups' trajectories not yet checked at
    this version against it and returns those it truncated: they go back to the engine to
    regenerate their suffix, and their groups wait. `admit_eta` (default `eta`) bounds
    admission alone: 0 after a switch to synchronous training, while the groups already in
    play keep their deadlines. `in_start_order`: the batch is the B groups that started first
    (rollout.batch_order). When `should_stop()` turns true, or the engine is lost for good
    (EngineLost: the run stops after its checkpoint), the engine's work goes into
    `state.in_flight` and RolloutInterrupted is raised: nothing is lost."""
    admit_eta = eta if admit_eta is None else admit_eta
    start = time.perf_counter()
    state.tokens_since_last_batch(engine)  # (starts the count at a run's first batch)
    try:  # a stop request, or the engine lost: its work goes into state.in_flight
        chosen = _generate_until_ready(
            engine, source, state, version, eta, batch_groups, group_size, wait_for_weights,
            verify, admit_eta, should_stop, in_start_order,
        )  # fmt: skip
    except (StopRequested, EngineLost) as stopped:
        state.take_out(engine)
        raise RolloutInterrupted(  # booked now: the checkpoint keeps nothing uncounted
            time.perf_counter() - start,
            *state.tokens_since_last_batch(engine, hand_out=True),
            lost=stopped if isinstance(stopped, EngineLost) else None,
        ) from None
    generated, regenerated = state.tokens_since_last_batch(engine, hand_out=True)
    return batch_out_of_play(state, chosen, start, generated, regenerated)


def _generate_until_ready(
    engine: RolloutEngine,
    source: PromptSource,
    state: AsyncState,
    version: int,
    eta: int,
    batch_groups: int,
    group_size: int,
    wait_for_weights: Callable[[], bool],
    verify: Callable[[list[Trajectory], int], list[Trajectory]] | None,
    admit_eta: int,
    should_stop: Callable[[], bool],
    in_start_order: bool,
) -> list[int]:
    """next_batch's loop: admit, verify the chosen groups, poll, until a batch is ready."""
    # a stop's or a checkpoint's, first and in order (out of state first: a submit that meets
    # a lost engine hands them to the pause)
    in_flight, state.in_flight = state.in_flight, []
    engine.submit(in_flight)
    regenerating = False  # what verification cut is back in the engine
    while True:
        admit(engine, source, state, version, admit_eta, batch_groups, group_size)
        chosen = ready_batch(state, version, eta, batch_groups, group_size, in_start_order)
        if chosen is not None and verify is not None:
            cut = verify_once(state, chosen, version, verify)
            if cut:
                engine.submit(cut)  # regenerate their suffixes; their groups wait for them
                regenerating = True
                continue
        if chosen is not None:
            return chosen
        if should_stop():
            raise StopRequested
        if engine.has_work:
            for trajectory in engine.poll():
                state.finished[trajectory.group_id].append(trajectory)
            if regenerating:  # tests: killed with cut trajectories regenerating
                kill_point("regenerating", version + 1)
        elif not wait_for_weights():
            raise RuntimeError(
                f"async rollout stalled at version {version}: nothing running, nothing "
                "admissible, and no weights on the way"
            )


def admit(
    engine: RolloutEngine,
    source: PromptSource,
    state: AsyncState,
    trains_next: int,
    admit_eta: int,
    batch_groups: int,
    group_size: int,
) -> None:
    """Start new groups while slots are idle and the staleness bound admits them (the trainer
    trains version `trains_next` next)."""
    while engine.idle_slots() > 0 and may_start(
        len(state.start_versions), engine.version, trains_next, admit_eta, batch_groups
    ):
        group = source.next_group()
        state.answers[group.group_id] = group.answer
        state.start_versions[group.group_id] = engine.version
        state.started += 1
        engine.submit(group.samples(group_size))


def ready_batch(
    state: AsyncState,
    version: int,
    eta: int,
    batch_groups: int,
    group_size: int,
    in_start_order: bool = False,
) -> list[int] | None:
    """The groups the step at `version` trains, or None while it must wait (choose_batch)."""
    complete = {g for g, members in state.finished.items() if len(members) == group_size}
    return choose_batch(state.start_versions, complete, version, eta, batch_groups, in_start_order)


def batch_out_of_play(
    state: AsyncState, chosen: list[int], start: float, generated: int, regenerated: int
) -> RolloutResult:
    """The chosen groups out of play, as the trainer's batch: their members (by sample index)
    and answers; `start`: perf_counter when the trainer began waiting for it."""
    groups = [sorted(state.finished.pop(g), key=lambda t: t.sample_index) for g in chosen]
    for group in chosen:
        state.start_versions.pop(group)
    for trajectory in (t for members in groups for t in members):
        state.checked.pop(trajectory.key, None)
    return RolloutResult(
        groups=groups,
        answers=[state.answers.pop(g) for g in chosen],
        seconds=time.perf_counter() - start,
        resumed=0,
        paused=0,
        tokens_generated=generated,
        tokens_regenerated=regenerated,
    )


def verify_once(
    state: AsyncState,
    chosen: list[int],
    version: int,
    verify: Callable[[list[Trajectory], int], list[Trajectory]],
) -> list[Trajectory]:
    """Verify the chosen groups' trajectories not yet verified at `version`; take those it
    truncated out of their groups (unfinished again) and return them."""
    fresh = [t for g in chosen for t in state.finished[g] if state.checked.get(t.key) != version]
    for trajectory in fresh:
        state.checked[trajectory.key] = version
    cut = verify(fresh, version) if fresh else []
    for trajectory in cut:  # (by identity: a Trajectory's == compares tensors)
        members = state.finished[trajectory.group_id]
        members[:] = [t for t in members if t is not trajectory]
    return cut
