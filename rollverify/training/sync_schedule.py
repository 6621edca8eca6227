"""The synchronous schedule (rollout.mode sync or partial): what loop.py hands over to get a
batch, land the weights and verify the cache, when the engine works only between steps.
AsyncSchedule (async_schedule.py) is the other schedule behind the same calls:

  rollout     next_batch()      B complete groups (rollout/schedules.py collect), the cache's
                                paused trajectories first; partial until the monitor switches
  sync        load_weights()    between steps, nothing in flight
  verify      take_checks()     after the update: the cache under the new policy, verified if
                                the method does, else measured if asked (cache_check.py)
  booking     book_overlap()    nothing: the engine is idle while the trainer works
  evaluation, engine_out()      nothing to take out: the engine holds no sequence between steps
  checkpoint
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from rollverify.config import RolloutConfig, TrackingConfig, VerifyConfig
from rollverify.core.methods import Method
from rollverify.core.switching import AcceptanceMonitor
from rollverify.rollout.engines.protocol import RolloutEngine
from rollverify.rollout.schedules import PromptSource, RolloutResult, RolloutState, collect
from rollverify.rollout.trajectory import Trajectory
from rollverify.training.booking import Clock
from rollverify.training.cache_check import cached_unfinished, check_cache
from rollverify.training.records import CacheCheck, StepRecords
from rollverify.training.weight_sync import WeightStream

Score = Callable[[list[Trajectory] | None], torch.Tensor]  # log pi_old, every rank scoring
DropGroup = Callable[[list[Trajectory], str], bool]  # dynamic sampling's tie filter


class SynchronousSchedule:
    """The cache of paused trajectories between steps (RolloutState) and the switch's effect
    on the schedule. `main`: this process is rank 0, the one that holds the engine."""

    threaded = False  # the engine never runs beside the trainer

    def __init__(
        self,
        rollout: RolloutConfig,
        engine: RolloutEngine | None,
        source: PromptSource,
        method: Method,
        verify: VerifyConfig,
        tracking: TrackingConfig,
        monitor: AcceptanceMonitor,
        score: Score,
        drop_group: DropGroup,
        main: bool,
    ) -> None:
        self.rollout, self.engine, self.source = rollout, engine, source
        self.method, self.verify, self.tracking = method, verify, tracking
        self.monitor, self.score, self.drop_group, self.main = monitor, score, drop_group, main
        self.state = RolloutState()

    @property
    def version(self) -> int:
        """The policy trained next: the engine's."""
        return self.engine.version

    @property
    def partial(self) -> bool:
        """Partial rollout until the monitor switches the run to on-policy, for good."""
        return self.method.partial and not self.monitor.switched

    @property
    def cache_size(self) -> int:
        """Trajectories waiting in the cache (paused, or finished waiting for their group)."""
        return len(self.state.cache)

    # -- rollout --------------------------------------------------------------------------------

    def next_batch(self, records: StepRecords, should_stop: Callable[[], bool]) -> RolloutResult:
        """B complete groups from the engine (rank 0); RolloutInterrupted if should_stop()."""
        rollout = self.rollout
        return collect(
            self.engine,
            self.source,
            self.state,
            batch_groups=rollout.batch_groups,
            group_size=rollout.group_size,
            partial=self.partial,
            max_inflight_groups=rollout.max_inflight_groups,
            should_stop=should_stop,
            drop_group=self.drop_group,
            max_drops=rollout.dynamic_sampling_max_drops,
            max_staleness=rollout.max_staleness,
        )

    def take_trace(self) -> list:
        """The engine's steps since the last call."""
        return self.engine.take_trace()

    def reading(self) -> AbstractContextManager:
        """The engine, the trainer's to read: it is idle between steps."""
        return nullcontext()

    # -- weight sync ----------------------------------------------------------------------------

    def load_weights(self, tensors: WeightStream, step: int) -> None:
        """Between steps: no sequence is in flight."""
        self.engine.load_weights(tensors, step)

    # -- verification and booking ---------------------------------------------------------------

    def take_checks(self, step: int, records: StepRecords) -> CacheCheck:
        """The cache under the new policy, every rank scoring a part: verified if the method
        does (rank 0), else measured (cache_check.py). Empty on the other ranks."""
        if not (self.method.verify or self.tracking.cache_ops):
            return CacheCheck()  # nothing acts on it, and its OPS are not asked for
        cached = cached_unfinished(self.state.cache) if self.main else None
        check = CacheCheck()
        with Clock() as scoring:
            current = self.score(cached)
            if self.main:
                # after the sync of step s the policy is version s (docs/rules.md, section 1)
                check = check_cache(
                    cached, current, self.method, self.verify, self.monitor, step, step
                )
        # (check.scored: the work of the trajectories as verification left them)
        records.scoring.add(self.method.verify, scoring.seconds, check.scored)
        return check

    def book_overlap(self, records: StepRecords) -> None:
        """Nothing overlaps: the engine is idle while the trainer works."""

    # -- evaluations and checkpoints ------------------------------------------------------------

    def engine_out(self) -> AbstractContextManager:
        """Nothing to take out: between steps the engine holds no sequence."""
        return nullcontext()

    def state_dict(self) -> dict[str, Any]:
        """The cache and the groups' answers (under "rollout")."""
        return {"rollout": self.state.state_dict()}

    def load_state_dict(self, rollout: dict[str, Any]) -> None:
        self.state.load_state_dict(rollout)

    def close(self) -> None:
        """Nothing runs beside the trainer."""
