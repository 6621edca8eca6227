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
                                         check_and_reward()
                                                        rank 0: OPS and sample filter
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

The rollout schedule, chosen once at setup (`self.rollouts`), does what differs by
rollout.mode behind the same calls: synchronous or partial rollout (sync_schedule.py) works
between steps and verifies the cache after the update; asynchronous rollout (async_schedule.py)
verifies in flight, lands the weights in flight or in the engine's thread, and takes the
engine's sequences out for an evaluation or a checkpoint.

Booking (booking.py): scoring is timed into the records, evaluations and checkpoints are
timed phases of their own, the rest once, after the step. In a run of several processes
(distributed/world.py) rank 0 does all of the above but the update; the others meet it at the
world's named calls."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from rollverify.config import RunConfig
from rollverify.core.methods import Method
from rollverify.core.switching import AcceptanceMonitor
from rollverify.infra.kill_points import kill_point, phase_mark
from rollverify.rollout.dynamic_sampling import tie_filter
from rollverify.rollout.engines.protocol import EngineLost, RolloutEngine
from rollverify.rollout.schedules import RolloutInterrupted, RolloutResult
from rollverify.rollout.tool_calls import ToolCountsSince
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.base import Task
from rollverify.tasks.evaluation import Evaluation, evaluate_sets
from rollverify.tracking.metric_names import trl_metrics
from rollverify.tracking.tracker import Tracker
from rollverify.training.batch_check import check_batch
from rollverify.training.booking import Booking, Clock
from rollverify.training.cache_check import forward_work
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
from rollverify.training.rollout_schedule import rollout_schedule
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
        *,
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
        self.monitor = AcceptanceMonitor(config.verify.window, config.verify.switch_threshold)
        self.eval_sets = task.eval_sets()
        # A fixed token sequence to compare engine and trainer after each weight sync.
        self.probe = torch.cat([p.prompt_ids for p in task.eval_problems()[:8]])[:64]
        self.records = StepRecords(started=time.perf_counter())  # of the step in progress
        self.tool_counts = ToolCountsSince()  # the engine's tool calls since the last batch
        self.counters = RunCounters()  # the run's own running figures
        self.last_metrics: dict[str, float] = {}  # the last step's, as logged
        self.schedule = Schedule(config.train, start_step)  # when to evaluate, checkpoint, stop
        self.trained_batch: BatchRecord | None = None  # the rollout batch being trained
        callback = LoopCallback(self, logged_step=start_step, resuming=start_step > 0)
        folder = str(run_dir / "trl") if run_dir is not None else "trl"
        self.trainer: BehaviorRatioGRPOTrainer = build_trainer(
            config, method, model, tokenizer, self.reward, self.rollout, callback, output_dir=folder
        )
        self.rewards = Rewards(task, self.trainer.processing_class, config.rollout)
        self.rollouts = rollout_schedule(  # synchronous (or partial), or asynchronous
            config, engine, task, method, self.monitor, self._score,
            tie_filter(self.rewards.of_group), main=world.main,
        )  # fmt: skip
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
        return self.rollouts.version

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
            old_logprobs = self._score(trajectories)
        self.records.scoring.add(used, scoring.seconds, forward_work(trajectories or []))
        main = self.world.main
        if main:  # (only rank 0 holds the engine, and its version)
            phase_mark("training", self.version + 1)
        batch = self.check_and_reward(result, trajectories, old_logprobs) if main else None
        return self.world.share(batch)

    def _collect(self) -> RolloutResult | None:
        """B complete groups from the engine; None if a stop request paused the rollout."""

        def stop_now() -> bool:
            kill_point("rollout", self.version + 1)  # tests: killed as the engine generates
            return self.stop.requested

        phase_mark("generation", self.version + 1)  # tests: which phase a lost node met
        try:
            return self.rollouts.next_batch(self.records, should_stop=stop_now)
        except RolloutInterrupted as interrupted:  # booked now: the checkpoint keeps it
            trace = self.rollouts.take_trace()
            self.booking.paused_rollout(interrupted, trace, self.version + 1)
            if interrupted.lost is not None:  # the run stops with it, once checkpointed
                self.checkpoints.fail_after_step(interrupted.lost)
            return None

    def check_and_reward(
        self, result: RolloutResult, trajectories: list[Trajectory], old_logprobs: torch.Tensor
    ) -> dict[str, list]:
        """Rank 0: the batch's OPS, filter and rewards, as TRL's rollout_func returns them.
        old_logprobs: log pi_old of its tokens, float [B*G, >= T]."""
        with self.rollouts.reading():  # the rollout's tool calls (a task with a tool), restarts,
            tool_calls = self.tool_counts.take(self.engine)  # trace (all three: since the last
            restarts, steps = self.engine.stats.restarts, self.rollouts.take_trace()  # batch)
        self.records.batch = self.trained_batch = check_batch(
            result,
            trajectories,
            old_logprobs,
            self.method,
            self.config.verify,
            self.version,
            cache_size=self.rollouts.cache_size,
            engine_restarts=restarts,
            engine_steps=steps,
            tool_calls=tool_calls,
        )
        keep = self.trained_batch.keep
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
        records.sync = self.sync_weights(step, skip=stopping or self.checkpoints.failure_due())
        stopping = stopping or self.checkpoints.failure_due()  # the engine's weights are mixed
        records.cache = self.verify_cache(step)
        self.rollouts.book_overlap(records)  # an engine in its thread: busy beside the trainer
        if not self.world.main:  # the rest (ledger, evaluation) is rank 0's
            return
        self.booking.after_step(step, records, self.trained_batch, self.counters)
        due = self.schedule.evaluation_due(step)
        if due and not stopping:
            phase_mark("evaluation", step)
            try:
                records.evaluation = self.evaluate()
            except EngineLost as lost:  # owed to the resumed run, as a stop's evaluation is
                self.checkpoints.fail_after_step(lost)
                stopping = True
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
        if self.world.main and self.rollouts.threaded:  # to the engine's thread
            gap = self.rollouts.send_weights(model, step, dtype, probe, tolerance)
            return SyncRecord(seconds=time.perf_counter() - start, gap=gap, engine_steps=[])
        # rank 0 loads (between steps, or between two tokens of every sequence); the other
        # ranks take their part of each gather
        load = self.rollouts.load_weights if self.world.main else None
        phase_mark("weight sync", step)
        try:
            gap, probe_steps = sync_engine(self.engine, model, dtype, probe, tolerance, step, load)
        except EngineLost as lost:  # the step ends, checkpointed; then the run stops with it
            self.checkpoints.fail_after_step(lost)
            gap, probe_steps = None, []
        phase_mark("training", step)  # (the cache's verification: the trainer's)
        return SyncRecord(seconds=time.perf_counter() - start, gap=gap, engine_steps=probe_steps)

    def verify_cache(self, step: int) -> CacheCheck:
        """The step's verifications: of the cache under the new policy (synchronous), or in
        flight before the batch trained (asynchronous)."""
        return self.rollouts.take_checks(step, self.records)

    def evaluate(self) -> Evaluation:
        """Every eval set at once (rollverify/tasks/evaluation.py); its time is the eval phase.
        Asynchronous training: the sequences in flight wait outside the engine meanwhile."""
        with (
            self.rollouts.engine_out(),  # (an evaluation's; the engine is the trainer's from here)
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
        self.rollouts.close()

    # -- the checkpoint contract (checkpoint_client.py writes them) --------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything of the loop's own a resumed run needs, by owner. Tensors only under
        rollout.cache.tensors; the rest is JSON-able. Asynchronous training: the engine's
        sequences are taken out first (the next rollout submits them again, in order)."""
        with self.rollouts.engine_out():  # (a checkpoint's)
            # the cache, or the groups in play (and a thread's engine RNG)
            return self.rollouts.state_dict() | {
                "task": self.task.state_dict(),
                "monitor": self.monitor.state_dict(),
                "ledger": self.booking.ledger.state_dict(),
                "loop": self.counters.state_dict(),
            }

    def load_state_dict(self, state: dict[str, Any], step: int) -> None:
        """Continue from a checkpoint of `step` (the trainer's state comes back through its
        resume hooks, training/trl_adapter.py)."""
        self.task.load_state_dict(state["task"])
        self.rollouts.load_state_dict(state["rollout"])
        self.monitor.load_state_dict(state["monitor"])
        self.booking.ledger.load_state_dict(state["ledger"])
        self.counters.load_state_dict(state["loop"])
        self.booking.resumed(self.run_dir, step)
