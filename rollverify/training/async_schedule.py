"""The asynchronous schedule's extra work beside the step (rollout.mode async): what loop.py
hands over where a phase of asynchronous training differs from the synchronous one.

  rollout     next_batch()      the staleness bound's next B groups (rollout/async_rollout.py),
                                from the engine in lock-step or in a thread of its own
                                (rollout.lockstep false, rollout/engine_thread.py, started at
                                the first rollout, once a resumed run's state is back); stale
                                trajectories verified on the way (_verify_in_flight), their
                                cut suffixes regenerated
  sync        send_weights()    in its thread: a copy of the weights, landing there
              load_weights()    in lock-step: between two tokens of every sequence
  verify      take_checks()     the step's verifications in flight, as one record
  booking     book_overlap()    in its thread: the engine's and the trainer's busy seconds
  evaluation, engine_out()      the engine's sequences out meanwhile (a hold parks its
  checkpoint                    thread), submitted again by the next rollout
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from transformers import PreTrainedModel

from rollverify.config import RolloutConfig, VerifyConfig
from rollverify.core.methods import Method
from rollverify.core.switching import AcceptanceMonitor
from rollverify.cost.overlap import both_busy_seconds, busy_seconds, clipped
from rollverify.rollout.async_rollout import AsyncState, next_batch
from rollverify.rollout.engine_thread import EngineThread
from rollverify.rollout.engines.protocol import RolloutEngine, probe_logprobs_of
from rollverify.rollout.schedules import RolloutResult
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.base import Task
from rollverify.training.booking import Clock
from rollverify.training.cache_check import check_cache
from rollverify.training.records import CacheCheck, StepRecords
from rollverify.training.weight_sync import WeightStream, check_weight_sync

Score = Callable[[list[Trajectory]], torch.Tensor]  # log pi_old of their tokens, every rank


class AsyncSchedule:
    """The groups in play across batches (AsyncState), the engine's thread if it has one, and
    the step's verifications in flight."""

    def __init__(
        self,
        rollout: RolloutConfig,
        engine: RolloutEngine,
        task: Task,
        method: Method,
        verify: VerifyConfig,
        monitor: AcceptanceMonitor,
        score: Score,
    ) -> None:
        """score: the current policy's log-probs of trajectories (the trainer's, as it is
        when called)."""
        self.rollout, self.engine, self.task = rollout, engine, task
        self.method, self.verify, self.monitor, self.score = method, verify, monitor, score
        self.state = AsyncState()  # the groups in play
        self.checks: list[CacheCheck] = []  # ... and the step's verifications
        self.thread: EngineThread | None = None

    @property
    def version(self) -> int:
        """The policy trained next (the engine's, but in a thread of its own: it may lag)."""
        return self.thread.version if self.thread is not None else self.engine.version

    @property
    def threaded(self) -> bool:
        return not self.rollout.lockstep

    cache_size = 0  # no cache between steps: the groups in play are in `state`

    # -- rollout --------------------------------------------------------------------------------

    def next_batch(self, records: StepRecords, should_stop: Callable[[], bool]) -> RolloutResult:
        """The bound's next batch, from the engine in lock-step or in its thread. Its seconds
        are the trainer's wait, less the verification inside it (booked as verify)."""
        verified = records.scoring.verify_seconds
        verify = self._verifier(records) if self.method.verify else None
        admit_eta = 0 if self.monitor.switched else self.rollout.eta
        if self.threaded:
            result = self._engine_thread().next_batch(
                verify=verify, admit_eta=admit_eta, should_stop=should_stop
            )
            records.batch_ready = time.perf_counter()
        else:
            result = next_batch(
                self.engine,
                self.task,
                self.state,
                **self._bound(),
                version=self.version,
                wait_for_weights=lambda: False,  # lock-step: the weights are here already
                verify=verify,
                admit_eta=admit_eta,
                should_stop=should_stop,
            )
        result.seconds -= records.scoring.verify_seconds - verified
        return result

    def _verifier(self, records: StepRecords) -> Callable[[list[Trajectory], int], list]:
        def verify_in_flight(trajectories: list[Trajectory], version: int) -> list[Trajectory]:
            return self._verify_in_flight(trajectories, version, records)

        return verify_in_flight

    def _verify_in_flight(
        self, trajectories: list[Trajectory], version: int, records: StepRecords
    ) -> list[Trajectory]:
        """Before they train, the trajectories with tokens older than the policy, verified
        against it (the spec's two stages over their per-token versions); returns those it
        truncated, to regenerate their suffixes. Counts towards switching."""
        stale = [t for t in trajectories if len(t) and int(t.versions.min()) < version]
        if not stale:
            return []
        with Clock() as scoring:
            current = self.score(stale)
            check = check_cache(
                stale, current, self.method, self.verify, self.monitor, version + 1, version
            )
        records.scoring.add(True, scoring.seconds, check.scored)
        records.trainer_busy.append((scoring.start, scoring.start + scoring.seconds))
        self.checks.append(check)
        return [t for t in stale if not t.finished]

    def _engine_thread(self) -> EngineThread:
        if self.thread is None:
            keep_kv = self.rollout.keep_kv
            self.thread = EngineThread(
                self.engine, self.task, self.state, **self._bound(), keep_kv=keep_kv
            )
        return self.thread

    def _bound(self) -> dict[str, Any]:
        """The staleness bound's batches, as both drivers take them (async_rollout.py)."""
        rollout = self.rollout
        return {
            "batch_groups": rollout.batch_groups,
            "group_size": rollout.group_size,
            "eta": rollout.eta,
            "in_start_order": rollout.batch_order == "start",
        }

    def take_trace(self) -> list:
        """The engine's steps since the last call (in its thread: kept aside by holds)."""
        return self.thread.take_trace() if self.thread is not None else self.engine.take_trace()

    def reading(self) -> AbstractContextManager:
        """The engine, the trainer's to read while the block runs: in its thread, under the
        lock the engine thread holds inside it."""
        return self.thread.in_engine if self.thread is not None else nullcontext()

    # -- weight sync ----------------------------------------------------------------------------

    def load_weights(self, tensors: WeightStream, step: int) -> None:
        """Lock-step: the update lands between two tokens of every sequence."""
        keep_kv = self.rollout.keep_kv
        self.engine.load_weights_in_flight(tensors, step, recompute_kv=not keep_kv)

    def send_weights(
        self, model: PreTrainedModel, step: int, dtype: str, probe: list[int], tolerance: float
    ) -> float | None:
        """To the engine's thread: a copy of the weights (training goes on), landing at its
        next step boundary, then the probe check there. Returns the probe gap of the last
        update landed so far."""
        weights = [(n, t.clone()) for n, t in WeightStream(model, dtype)]
        trainer_probe = probe_logprobs_of(model, probe)

        def check(engine: RolloutEngine) -> float:
            return check_weight_sync(engine, probe, trainer_probe, tolerance, step)

        self.thread.send_weights(weights, step, check)
        return self.thread.last_gap

    # -- verification and booking ---------------------------------------------------------------

    def take_checks(self, step: int, records: StepRecords) -> CacheCheck:
        """The step's verifications (before training, in flight), as one record: nothing is
        verified after the update (`step` and `records` are the synchronous schedule's)."""
        checks, self.checks = self.checks, []
        return CacheCheck.merged(checks)

    def book_overlap(self, records: StepRecords) -> None:
        """The engine thread beside the trainer over this step: its wall, and the seconds
        the engine was busy, the trainer was (verifying, and from its batch to now), and both
        at once."""
        if self.thread is None or records.batch_ready is None:
            return
        now = time.perf_counter()
        engine = clipped(self.thread.take_busy(), records.started, now)
        trainer = [*records.trainer_busy, (records.batch_ready, now)]
        both = both_busy_seconds(engine, trainer)
        records.overlap = (now - records.started, busy_seconds(engine), busy_seconds(trainer), both)

    # -- evaluations and checkpoints ------------------------------------------------------------

    @contextmanager
    def engine_out(self) -> Iterator[None]:
        """The sequences in flight out of the engine while the block runs: its thread held
        (parked, its work taken out; let go after), or in lock-step taken out (the next
        rollout submits them again, in order)."""
        if self.thread is not None:
            with self.thread.held():
                yield
            return
        self.state.take_out(self.engine)
        yield

    def state_dict(self) -> dict[str, Any]:
        """The groups in play (under "rollout") and, with a thread, the engine's RNG, read
        while it is held."""
        held = {} if self.thread is None else {"engine_rng": self.engine.sampling_state()}
        return held | {"rollout": self.state.state_dict()}

    def load_state_dict(self, rollout: dict[str, Any]) -> None:
        self.state = AsyncState.from_state_dict(rollout)

    def close(self) -> None:
        """Stop the engine's thread, if it runs (the engine stays, its work lost with it)."""
        if self.thread is not None:
            self.thread.close()
            self.thread = None
