"""The one rollout interface the training step calls, whatever rollout.mode is, and the choice
of its schedule, made once at setup: synchronous or partial rollout (sync_schedule.py), or
asynchronous rollout (async_schedule.py)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from rollverify.config import RunConfig
from rollverify.core.methods import Method
from rollverify.core.switching import AcceptanceMonitor
from rollverify.rollout.engines.protocol import RolloutEngine
from rollverify.rollout.schedules import RolloutResult
from rollverify.tasks.base import Task
from rollverify.training.async_schedule import AsyncSchedule
from rollverify.training.records import CacheCheck, StepRecords
from rollverify.training.sync_schedule import DropGroup, Score, SynchronousSchedule
from rollverify.training.weight_sync import WeightStream


class RolloutSchedule(Protocol):
    """What the step asks of its rollout. A `threaded` schedule (an engine in a thread of
    its own) also takes `send_weights`: the update lands there, training goes on."""

    threaded: bool

    @property
    def version(self) -> int:
        """The policy trained next."""

    @property
    def cache_size(self) -> int:
        """Trajectories waiting between steps (logged as cache_size)."""

    def next_batch(self, records: StepRecords, should_stop: Callable[[], bool]) -> RolloutResult:
        """The step's B complete groups; RolloutInterrupted once should_stop() is true."""

    def take_trace(self) -> list:
        """The engine's steps since the last call."""

    def reading(self) -> AbstractContextManager:
        """The engine, the trainer's to read while the block runs."""

    def load_weights(self, tensors: WeightStream, step: int) -> None:
        """The update into the engine, from rank 0."""

    def take_checks(self, step: int, records: StepRecords) -> CacheCheck:
        """The step's verifications of stale trajectories, as one record."""

    def book_overlap(self, records: StepRecords) -> None:
        """The engine's busy seconds beside the trainer's, into the records."""

    def engine_out(self) -> AbstractContextManager:
        """The engine's sequences out of it while the block runs (an evaluation, a checkpoint)."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of it (under "rollout", and the engine's RNG if threaded)."""

    def load_state_dict(self, rollout: dict[str, Any]) -> None: ...

    def close(self) -> None:
        """Stop whatever runs beside the trainer."""


def rollout_schedule(
    config: RunConfig,
    engine: RolloutEngine | None,
    task: Task,
    method: Method,
    monitor: AcceptanceMonitor,
    score: Score,
    drop_group: DropGroup,
    main: bool,
) -> RolloutSchedule:
    """The schedule of rollout.mode: async, else synchronous (partial if the method is)."""
    if config.rollout.mode == "async":
        return AsyncSchedule(config.rollout, engine, task, method, config.verify, monitor, score)
    return SynchronousSchedule(
        config.rollout, engine, task, method, config.verify, config.tracking, monitor, score,
        drop_group, main=main,
    )  # fmt: skip
