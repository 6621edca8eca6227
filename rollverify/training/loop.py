"""One optimizer step of GRPO with (verified) partial rollout, top to bottom, in the order it
runs. Each phase fills its record of the step (training/records.py).

TRL drives the loop (transformers' Trainer._inner_training_loop); the hook on the left calls
the phase on the right, once per optimizer step (trl_callback.py hands the hooks over):

  on_step_begin                        begin_step()     the step's records start empty
  training_step -> _prepare_inputs     (a new batch every train.updates_per_rollout steps)
   -> _generate_and_score_completions  (ours, trl_adapter.py, around TRL's)
    -> _generate -> rollout_func       rollout()
                                         _collect()     rank 0: B complete groups, the cache's
                                                        paused trajectories first; a stop
                                                        pauses it: checkpoint, RunInterrupted
                                         world.score    every rank scores a part of the batch
                                                        under the current policy (pi_old)
                                         batch()        rank 0: OPS and sample filter
                                                        (batch_check.py), rewards -> BatchRecord
                                         world.share    every rank gets its slice
    -> _calculate_rewards              reward()         those rewards (a dropped sample: None)
    -> TRL: group advantages; pi_old recomputed if train.ratio_denominator is "recomputed" or
       a correction needs it; our ratio pi / mu_behavior (trl_adapter.py)
   -> compute_loss                     TRL's clipped surrogate, backward
  optimizer.step
  on_step_end                          after_update()
                                         sync_weights() weights to the engine, checked
                                                                               -> SyncRecord
                                         verify_cache() the cache under the new policy:
                                                        verified (rollverify methods), switch
                                                        if acceptance collapsed -> CacheCheck
                                         booking        the step's cost: ledger and trace
                                         evaluate()     when due               -> Evaluation
  on_log                               log()            the step's metrics, from its records
                                       checkpoints      a checkpoint when due, a stop when asked
                                                        (checkpoint_client.py)

Asynchronous training (rollout.mode async) hands over where a phase differs (async_schedule.py):
the bound's next batch, verified in flight before it trains; the weights landing in flight or
in the engine's thread; the overlap of engine and trainer; the engine's sequences taken out for
an evaluation or a checkpoint.

Booking (booking.py): scoring is timed into the records, evaluations and checkpoints are timed
phases of their own, the rest is booked once, after the step. In a run of several processes
(training/distributed/world.py) rank 0 does all of the above but the update; the other ranks
meet it at the world's named calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from rollverify.config import RunConfig
from rollverify.core.methods import Method
from rollverify.core.switching import AcceptanceMonitor
from rollverify.infra.faults import kill_point
from rollverify.rollout.dynamic_sampling import tie_filter
from rollverify.rollout.engines.protocol import RolloutEngine
from rollverify.rollout.schedules import RolloutInterrupted, RolloutResult, RolloutState, collect
from rollverify.rollout.tool_calls import ToolCountsSince
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.base import Task
from rollverify.tasks.evaluation import Evaluation, evaluate_sets
from rollverify.tracking.metric_names import trl_metrics
from rollverify.tracking.tracker import Tracker
from rollverify.training.async_schedule import AsyncSchedule
from rollverify.training.batch_check import check_batch
from rollverify.training.booking import Booking, Clock
from rollverify.training.cache_check import cached_unfinished, check_cache, forward_work
from rollverify.training.checkpoint_client import CheckpointClient
from rollverify.training.distributed.world import World
from rollverify.training.records import (
    BatchRecord,
    CacheCheck,
    RunCounters,
    StepRecords,
    SyncRecord,
    step_metrics,
)
from rollverify.training.rewards import Rewards
from rollverify.training.schedule import Schedule
from rollverify.training.stopping import StopRequest
from rollverify.training.trl_adapter import BehaviorRatioGRPOTrainer, build_trainer, rollout_output
from rollverify.training.trl_callback import LoopCallback
from rollverify.training.weight_sync import sync_engine


class TrainingLoop:
    """The run's state between steps, and the phases of one step (see the module docstring).
    It builds its trainer: TRL calls back into `rollout`, `reward` and the callback."""

    def __init__(
        self,
        config: RunConfig,
        method: Method,
        task: Task,
        engine: RolloutEngine | None,
        tracker: Tracker | None,
        model: PreTrainedModel,
        tokenizer: Any,
        on_step: Callable[[int, dict[str, float]], None] = lambda step, metrics: None,
        run_dir: Path | None = None,
        stop: StopRequest | None = None,
        start_step: int = 0,
        world: World = World(),
    ) -> None:
        """engine and tracker: rank 0's (None on the other ranks of a world)."""
        self.config, self.method, self.task, self.engine = config, method, task, engine
        self.world = world
        self.tracker, self.on_step, self.run_dir = tracker, on_step, run_dir
        self.stop = stop if stop is not None else StopRequest()
        self.booking = Booking(config, active=world.main)  # the ledger and the trace
        if engine is not None:
            engine.take_trace()  # a reused engine's steps were another run's
        self.state = RolloutState()
        self.monitor = AcceptanceMonitor(config.verify.window, config.verify.switch_threshold)
        self.async_ = None  # rollout.mode async: its extra work, beside the step
        if config.rollout.mode == "async":
            self.async_ = AsyncSchedule(
                config.rollout, engine, task, method, config.verify, self.monitor, self._score
            )
        self.eval_sets = task.eval_sets()
        # A fixed token sequence to compare engine and trainer after each weight sync.
        self.probe = torch.cat([p.prompt_ids for p in task.eval_problems()[:8]])[:64]
        self.records = StepRecords(started=time.perf_counter())  # of the step in progress
        self.tool_counts = ToolCountsSince()  # the engine's tool calls since the last batch
        self.counters = RunCounters()  # the run's own running figures
        self.last_metrics: dict[str, float] = {}  # the last step's, as logged
        self.schedule = Schedule(config.train, start_step)  # when to evaluate, checkpoint, stop
        self.generation: BatchRecord | None = None  # the rollout batch being trained
        callback = LoopCallback(self, logged_step=start_step, resuming=start_step > 0)
        folder = str(run_dir / "trl") if run_dir is not None else "trl"
        self.trainer: BehaviorRatioGRPOTrainer = build_trainer(
            config, method, model, tokenizer, self.reward, self.rollout, callback, output_dir=folder
        )
        self.rewards = Rewards(task, self.trainer.processing_class, config.rollout)
        self.checkpoints = CheckpointClient(
            self,
            world=world,
            booking=self.booking,
            tracker=tracker,
            run_dir=run_dir,
            train=config.train,
            schedule=self.schedule,
            stop=self.stop,
            start_step=start_step,
        )

    @property
    def version(self) -> int:
        """The policy trained next (the engine's, but in a thread of its own: it may lag)."""
        return self.async_.version if self.async_ is not None else self.engine.version

    @property
    def partial(self) -> bool:
        """Partial rollout until the monitor switches the run to on-policy, for good."""
        return self.method.partial and not self.monitor.switched

    def _score(self, trajectories: list[Trajectory] | None) -> torch.Tensor:
        """log pi_old of their tokens, float [N, >= T]: every rank scores a part of them."""
        return self.world.score(trajectories, self.trainer.current_logprobs)

    # -- the step, in the order it runs -------------------------------------------------------

    def begin_step(self) -> None:
        """A new optimizer step (TRL's on_step_begin): its records start empty; its rollout,
        if this step starts one (every train.updates_per_rollout steps), fills them."""
        self.records = StepRecords(started=time.perf_counter())

    def rollout(self, prompts: list, trainer: Any) -> dict[str, list]:
        """TRL's rollout_func (its prompts are ignored: trl_adapter.py says why): rank 0 rolls
        out; every rank scores a part of the batch under the current policy (pi_old); rank 0
        filters and rewards it; every rank trains its slice."""
        result = self._collect() if self.world.main else None
        trajectories = list(result.trajectories()) if result is not None else None
        if self.world.agree_on_stop(result is None):  # a stop paused it: its tokens are cached
            self.checkpoints.stop_here()
        # The OPS filter acts on this score (its cost); every other method only logs it.
        used = self.method.sample_filter == "ops"
        with Clock() as scoring:
            current = self._score(trajectories)
        self.records.scoring.add(used, scoring.seconds, forward_work(trajectories or []))
        batch = self.batch(result, trajectories, current) if self.world.main else None
        return self.world.share(batch)

    def _collect(self) -> RolloutResult | None:
        """B complete groups from the engine; None if a stop request paused the rollout."""
        rollout = self.config.rollout

        def stop_now() -> bool:
            kill_point("rollout", self.version + 1)  # tests: killed as the engine generates
            return self.stop.requested

        try:
            if self.async_ is not None:
                return self.async_.next_batch(self.records, should_stop=stop_now)
            return collect(
                self.engine,
                self.task,
                self.state,
                batch_groups=rollout.batch_groups,
                group_size=rollout.group_size,
                partial=self.partial,
                max_inflight_groups=rollout.max_inflight_groups,
                should_stop=stop_now,
                drop_group=tie_filter(self.rewards.of_group),
                max_drops=rollout.dynamic_sampling_max_drops,
                max_staleness=rollout.max_staleness,
            )
        except RolloutInterrupted as interrupted:  # booked now: the checkpoint keeps it
            self.booking.paused_rollout(
                interrupted, (self.async_ or self.engine).take_trace(), self.version + 1
            )
            return None

    def batch(
        self, result: RolloutResult, trajectories: list[Trajectory], current: torch.Tensor
    ) -> dict[str, list]:
        """Rank 0: the batch's OPS, filter and rewards, as TRL's rollout_func returns them.
        current: log pi_old of its tokens, float [B*G, >= T]."""
        with self._engine_read():  # the rollout's tool calls (a task with a tool), restarts, trace
            tool_calls = self.tool_counts.take(self.engine)  # (all three: since the last batch)
            restarts, steps = self.engine.stats.restarts, (self.async_ or self.engine).take_trace()
        self.records.batch = self.generation = check_batch(
            result,
            trajectories,
            current,
            self.method,
            self.config.verify,
            self.version,
            cache_size=len(self.state.cache),
            engine_restarts=restarts,
            engine_steps=steps,
            tool_calls=tool_calls,
        )
        keep = self.generation.keep
        output = rollout_output(result, keep, mask_dropped=self.method.sample_filter is not None)
        rewards = self.rewards.of_batch(output["completion_ids"], output["answer"])
        self.records.reward_mean = sum(rewards) / len(rewards)
        self.records.reward_checks = self.rewards.checks()
        output["reward"] = rewards
        return output

    def reward(self, reward: list[float], keep: list[bool], **_: Any) -> list[float | None]:
        """TRL's reward function: this rank's slice of the rewards scored at rollout. None =
        unscorable to TRL: out of the group baseline, advantage 0 (a dropped sample)."""
        return [r if k else None for r, k in zip(reward, keep, strict=True)]

    # -- TRL: advantages, loss, backward, optimizer step (trl_adapter.py) --

    def after_update(self, step: int) -> None:
        """TRL's on_step_end, after each optimizer step."""
        records = self.records
        # The update's time: since the rollout began, less the rollout and the batch's scoring.
        rollout_seconds = records.batch.result.seconds if records.batch is not None else 0.0
        records.train_seconds = (
            time.perf_counter() - records.started - rollout_seconds - records.scoring.seconds
        )
        # Stopping before the last step: the engine is not needed again (a resumed run syncs
        # it first, and evaluates then if an evaluation was due), and its processes may have
        # the signal too (Ctrl-C reaches the process group).
        stopping = self.checkpoints.stop_requested() and step < self.config.train.steps
        records.sync = self.sync_weights(step, skip=stopping)
        records.cache = self.verify_cache(step)
        if self.async_ is not None:  # the engine in its thread: busy beside the trainer
            self.async_.book_overlap(records)
        if not self.world.main:  # the rest (ledger, evaluation) is rank 0's
            return
        self.booking.after_step(step, records, self.generation, self.counters)
        due = self.schedule.evaluation_due(step)
        if due and not stopping:
            records.evaluation = self.evaluate()
        self.counters.eval_pending = due and stopping
        self.booking.write_ledger(self.run_dir)

    def sync_weights(self, step: int, skip: bool) -> SyncRecord:
        """The new weights to the engine, then the probe check (skipped: nothing sent). Every
        rank takes part: a sharded model's tensors are gathered one at a time as rank 0 sends
        them, and its probe forward needs every rank too."""
        start = time.perf_counter()
        if skip:
            return SyncRecord(seconds=time.perf_counter() - start, gap=None, engine_steps=[])
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        dtype, probe = self.config.model.dtype, self.probe.tolist()
        tolerance = self.config.vllm.sync_check_tolerance
        if self.world.main and self.async_ is not None and self.async_.threaded:
            gap = self.async_.send_weights(model, step, dtype, probe, tolerance)
            return SyncRecord(seconds=time.perf_counter() - start, gap=gap, engine_steps=[])
        load = None  # the other ranks: their part of each gather
        if self.world.main and self.async_ is not None:  # between two tokens of every sequence
            load = self.async_.load_in_flight
        elif self.world.main:
            load = self.engine.load_weights
        gap, probe_steps = sync_engine(self.engine, model, dtype, probe, tolerance, step, load)
        return SyncRecord(seconds=time.perf_counter() - start, gap=gap, engine_steps=probe_steps)

    def verify_cache(self, step: int) -> CacheCheck:
        """The cache under the new policy, every rank scoring a part: verified if the method
        does (rank 0), else measured (cache_check.py). Empty on the other ranks. Asynchronous
        training verifies before training instead (in flight): its checks of the step."""
        if self.async_ is not None:
            return self.async_.take_checks()
        if not (self.method.verify or self.config.tracking.cache_ops):
            return CacheCheck()  # nothing acts on it, and its OPS are not asked for
        cached = cached_unfinished(self.state.cache) if self.world.main else None
        check = CacheCheck()
        with Clock() as scoring:
            current = self._score(cached)
            if self.world.main:
                verify = self.config.verify
                check = check_cache(cached, current, self.method, verify, self.monitor, step)
        # (check.scored: the work of the trajectories as verification left them)
        self.records.scoring.add(self.method.verify, scoring.seconds, check.scored)
        return check

    def evaluate(self) -> Evaluation:
        """Every eval set at once (rollverify/tasks/evaluation.py); its time is the eval phase.
        Asynchronous training: the sequences in flight wait outside the engine meanwhile."""
        with (
            self._sequences_out(),  # (an evaluation's; the engine is the trainer's from here)
            self.booking.phase("eval", self.version, self.engine),
            getattr(self.engine, "counted_apart", nullcontext)(),  # its tool calls
        ):
            evaluation = evaluate_sets(
                self.engine,
                self.task,
                self.eval_sets,
                samples=self.config.task.eval_samples,
                seed=self.config.task.eval_seed,
            )
            self.counters.last_eval = evaluation.accuracy
        return evaluation

    def log(self, step: int, trl_logs: dict[str, float]) -> None:
        """The step's metrics, from its records, in one call to the tracker (TRL's logs are
        gathered over the ranks already)."""
        if not self.world.main:
            return
        values = step_metrics(
            self.records,
            verifies=self.method.verify,
            monitor=self.monitor,
            device_seconds=self.counters.device_seconds,
            entropy=trl_logs.get("entropy"),
            ledger=self.booking.ledger.metrics(),
        )
        values |= trl_metrics(trl_logs)
        self.tracker.log_metrics(values, step=step)
        self.counters.remember_first(values)
        self.last_metrics = values
        self.on_step(step, values)

    def close(self) -> None:
        """Stop the engine's thread, if it runs (the engine stays, its work lost with it)."""
        if self.async_ is not None:
            self.async_.close()

    # -- the checkpoint contract (checkpoint_client.py writes them) --------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything of the loop's own a resumed run needs, by owner. Tensors only under
        rollout.cache.tensors; the rest is JSON-able. Asynchronous training: the engine's
        sequences are taken out first (the next rollout submits them again, in order)."""
        with self._sequences_out():  # (a checkpoint's)
            if self.async_ is not None:  # the groups in play (and a thread's engine RNG)
                rollout = self.async_.state_dict()
            else:
                rollout = {"rollout": self.state.state_dict()}
            return rollout | {
                "task": self.task.state_dict(),
                "monitor": self.monitor.state_dict(),
                "ledger": self.booking.ledger.state_dict(),
                "loop": self.counters.state_dict(),
            }

    def _sequences_out(self) -> AbstractContextManager:
        """Asynchronous training: the engine's sequences out while the block runs."""
        return self.async_.engine_out() if self.async_ is not None else nullcontext()

    def _engine_read(self) -> AbstractContextManager:
        """The engine read by the trainer: in a thread of its own, one at a time inside it."""
        return self.async_.reading() if self.async_ is not None else nullcontext()

    def load_state_dict(self, state: dict[str, Any], step: int) -> None:
        """Continue from a checkpoint of `step` (the trainer's state comes back through its
        resume hooks, training/trl_adapter.py)."""
        self.task.load_state_dict(state["task"])
        (self.async_ or self.state).load_state_dict(state["rollout"])
        self.monitor.load_state_dict(state["monitor"])
        self.booking.ledger.load_state_dict(state["ledger"])
        self.counters.load_state_dict(state["loop"])
        self.booking.resumed(self.run_dir, step)
