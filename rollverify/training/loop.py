"""One optimizer step of GRPO with (verified) partial rollout, top to bottom, in the order it
runs. Each phase fills its record of the step (training/records.py).

TRL drives the loop (transformers' Trainer._inner_training_loop); the hook on the left calls
the phase on the right, once per optimizer step:

  on_step_begin                        begin_step()     the step's records start empty
  training_step -> _prepare_inputs     (a new batch every train.updates_per_rollout steps)
   -> _generate_and_score_completions  (ours, trl_adapter.py, around TRL's)
    -> _generate -> rollout_func       rollout()
                                         _collect()     rank 0: resume the cache's paused
                                                        trajectories, generate until B groups
                                                        finish; a stop pauses it: checkpoint,
                                                        RunInterrupted
                                         world.score    every rank scores a part of the batch
                                                        under the current policy (pi_old)
                                         batch()        rank 0: OPS, sample filter, rewards
                                                        (the task's verifier)  -> BatchRecord
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

Booking (booking.py): scoring is timed into the records, evaluations and checkpoints are timed
phases of their own, the rest is booked once, after the step. In a run of several processes
(training/distributed/world.py) rank 0 does all of the above but the update; the other ranks
meet it at the world's named calls.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, TrainerCallback

from rollverify.config import RunConfig
from rollverify.core.corrections import mismatch
from rollverify.core.filters import keep_samples, staleness, token_staleness
from rollverify.core.methods import Method
from rollverify.core.off_policy_shift import sequence_ops, token_ops
from rollverify.core.switching import AcceptanceMonitor
from rollverify.cost.overlap import both_busy_seconds, busy_seconds, clipped
from rollverify.infra.faults import kill_point
from rollverify.rollout.async_rollout import AsyncState, next_batch
from rollverify.rollout.dynamic_sampling import tie_filter
from rollverify.rollout.engine_thread import EngineThread
from rollverify.rollout.engines.protocol import RolloutEngine, probe_logprobs_of
from rollverify.rollout.schedules import RolloutInterrupted, RolloutResult, RolloutState, collect
from rollverify.rollout.tool_calls import ToolStats
from rollverify.rollout.trajectory import PaddedTrajectories, Trajectory
from rollverify.tasks.base import Task
from rollverify.tasks.evaluation import Evaluation, evaluate_sets
from rollverify.tracking.metric_names import trl_metrics
from rollverify.tracking.tracker import Tracker
from rollverify.training.booking import Booking, Clock
from rollverify.training.cache_check import cached_unfinished, check_cache, forward_work
from rollverify.training.checkpoint_client import CheckpointClient
from rollverify.training.distributed.world import World
from rollverify.training.guards import require_finite
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
from rollverify.training.trl_adapter import (
    BehaviorRatioGRPOTrainer,
    build_trainer,
    rollout_output,
)
from rollverify.training.weight_sync import WeightStream, check_weight_sync


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
        self.asynchronous = config.rollout.mode == "async"
        self.async_state = AsyncState()  # rollout.mode async: the groups in play
        self.async_checks: list[CacheCheck] = []  # ... and the step's verifications
        # rollout.lockstep false: the engine in a thread of its own (started at the first
        # rollout, once a resumed run's state is back)
        self.engine_thread: EngineThread | None = None
        self.monitor = AcceptanceMonitor(config.verify.window, config.verify.switch_threshold)
        self.eval_sets = task.eval_sets()
        # A fixed token sequence to compare engine and trainer after each weight sync.
        self.probe = torch.cat([p.prompt_ids for p in task.eval_problems()[:8]])[:64]
        self.records = StepRecords(started=time.perf_counter())  # of the step in progress
        self.tool_calls: ToolStats | None = None  # of the last rollout (a task with a tool)
        self.tools_seen = ToolStats()  # the engine's tool counts when the last batch came
        self.counters = RunCounters()  # the run's own running figures
        self.last_metrics: dict[str, float] = {}  # the last step's, as logged
        self.schedule = Schedule(config.train, start_step)  # when to evaluate, checkpoint, stop
        self.generation: BatchRecord | None = None  # the rollout batch being trained
        self.trainer: BehaviorRatioGRPOTrainer = build_trainer(
            config,
            method,
            model,
            tokenizer,
            self.reward,
            self.rollout,
            LoopCallback(self, logged_step=start_step, resuming=start_step > 0),
            output_dir=str(run_dir / "trl") if run_dir is not None else "trl",
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
        if self.engine_thread is not None:
            return self.engine_thread.version
        return self.engine.version

    @property
    def threaded(self) -> bool:
        return self.asynchronous and not self.config.rollout.lockstep

    @property
    def partial(self) -> bool:
        """Partial rollout until the monitor switches the run to on-policy, for good."""
        return self.method.partial and not self.monitor.switched

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
        self.tool_calls = self._tool_calls_since_last_batch()
        trajectories = list(result.trajectories()) if result is not None else None
        if self.world.agree_on_stop(result is None):  # a stop paused it: its tokens are cached
            self.checkpoints.stop_here()
        # The OPS filter acts on this score (its cost); every other method only logs it.
        used = self.method.sample_filter == "ops"
        with Clock() as scoring:
            current = self.world.score(trajectories, self.trainer.current_logprobs)
        self.records.scoring.add(used, scoring.seconds, forward_work(trajectories or []))
        batch = self.batch(result, trajectories, current) if self.world.main else None
        return self.world.share(batch)

    def _tool_calls_since_last_batch(self) -> ToolStats | None:
        """The calls the rollout made since the last batch (a task with a tool), else None:
        in asynchronous training the engine also runs between batches; evaluations count
        theirs apart (_evaluate)."""
        stats = getattr(self.engine, "tool_stats", None)
        if stats is None:
            return None
        now = replace(stats)
        since, self.tools_seen = now.since(self.tools_seen), now
        return since

    def _collect(self) -> RolloutResult | None:
        """B complete groups from the engine; None if a stop request paused the rollout."""
        rollout = self.config.rollout
        polls = itertools.count()

        def stop_now() -> bool:
            if next(polls) == 10:  # tests only: a kill in the middle of this rollout
                kill_point("rollout", self.version + 1)
            return self.stop.requested

        try:
            if self.asynchronous:
                return self._next_batch(stop_now)
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
            self.booking.paused_rollout(interrupted, self._engine_steps(), self.version + 1)
            return None

    def _next_batch(self, stop_now: Callable[[], bool]) -> RolloutResult:
        """rollout.mode async: the bound's next batch, from the engine in lock-step or in its
        thread. Its seconds are the trainer's wait, less the verification inside it (booked
        as verify)."""
        rollout, verified = self.config.rollout, self.records.scoring.verify_seconds
        verify = self.verify_in_flight if self.method.verify else None
        admit_eta = 0 if self.monitor.switched else rollout.eta
        if self.threaded:
            result = self._engine_thread().next_batch(
                verify=verify, admit_eta=admit_eta, should_stop=stop_now
            )
            self.records.batch_ready = time.perf_counter()
        else:
            result = next_batch(
                self.engine,
                self.task,
                self.async_state,
                batch_groups=rollout.batch_groups,
                group_size=rollout.group_size,
                eta=rollout.eta,
                version=self.version,
                wait_for_weights=lambda: False,  # lock-step: the weights are here already
                verify=verify,
                admit_eta=admit_eta,
                should_stop=stop_now,
                in_start_order=rollout.batch_order == "start",
            )
        result.seconds -= self.records.scoring.verify_seconds - verified
        return result

    def _engine_thread(self) -> EngineThread:
        if self.engine_thread is None:
            rollout = self.config.rollout
            self.engine_thread = EngineThread(
                self.engine,
                self.task,
                self.async_state,
                batch_groups=rollout.batch_groups,
                group_size=rollout.group_size,
                eta=rollout.eta,
                keep_kv=rollout.keep_kv,
                in_start_order=rollout.batch_order == "start",
            )
        return self.engine_thread

    def _engine_steps(self) -> list:
        """The engine's steps since the last call (in its thread: kept aside by holds)."""
        if self.engine_thread is not None:
            return self.engine_thread.take_trace()
        return self.engine.take_trace()

    def close(self) -> None:
        """Stop the engine's thread, if it runs (the engine stays, its work lost with it)."""
        if self.engine_thread is not None:
            self.engine_thread.close()
            self.engine_thread = None

    def batch(
        self, result: RolloutResult, trajectories: list[Trajectory], current: torch.Tensor
    ) -> dict[str, list]:
        """Rank 0: the batch's OPS, filter and rewards, as TRL's rollout_func returns them.
        current: log pi_old of its tokens, float [B*G, >= T]."""
        batch = PaddedTrajectories.of(trajectories)
        require_finite("behavior log-probs from the engine", batch.behavior_logprobs, batch.mask)
        current = current[:, : batch.mask.shape[1]]
        require_finite("log-probs under the current policy", current, batch.mask)
        policy = batch.policy  # tool output is not the policy's: out of OPS and its metrics
        ops = token_ops(current, batch.behavior_logprobs, self.config.verify.ops_metric, policy)
        batch_ops = sequence_ops(ops, policy)
        keep = keep_samples(
            self.method.sample_filter, batch, batch_ops, self.version, self.config.verify
        )
        stale = staleness(batch.versions, batch.mask, self.version)
        self.records.batch = self.generation = BatchRecord(
            result=result,
            trajectories=trajectories,
            keep=keep,
            ops=batch_ops,
            lengths=batch.mask.sum(-1).float(),
            staleness_mean=stale.float().mean().item(),
            staleness_max=int(stale.max()),
            token_staleness=token_staleness(batch.versions, policy, self.version),
            mismatch=mismatch(current, batch.behavior_logprobs, policy),  # current = pi_old
            cache_size=len(self.state.cache),
            engine_restarts=self.engine.stats.restarts,
            engine_steps=self._engine_steps(),
            tool_calls=self.tool_calls,
        )
        output = rollout_output(result, keep, mask_dropped=self.method.sample_filter is not None)
        rewards = self.rewards.of_batch(output["completion_ids"], output["answer"])
        self.records.reward_mean = sum(rewards) / len(rewards)
        self.records.reward_checks = self.rewards.checks()
        output["reward"] = rewards
        return output

    def verify_in_flight(self, trajectories: list[Trajectory], version: int) -> list[Trajectory]:
        """rollout.mode async: before they train, the trajectories with tokens older than the
        policy, verified against it (the spec's two stages over their per-token versions);
        returns those it truncated, to regenerate their suffixes. Counts towards switching."""
        stale = [t for t in trajectories if len(t) and int(t.versions.min()) < version]
        if not stale:
            return []
        with Clock() as scoring:
            current = self.world.score(stale, self.trainer.current_logprobs)
            check = check_cache(
                stale, current, self.method, self.config.verify, self.monitor, version + 1
            )
        self.records.scoring.add(True, scoring.seconds, check.scored)
        self.records.trainer_busy.append((scoring.start, scoring.start + scoring.seconds))
        self.async_checks.append(check)
        return [t for t in stale if not t.finished]

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
        if self.engine_thread is not None and records.batch_ready is not None:
            records.overlap = self._overlap(records)
        if not self.world.main:  # the rest (ledger, evaluation) is rank 0's
            return
        self.booking.after_step(step, records, self.generation, self.counters)
        due = self.schedule.evaluation_due(step)
        if due and not stopping:
            records.evaluation = self.evaluate()
        self.counters.eval_pending = due and stopping
        self.booking.write_ledger(self.run_dir)

    def _overlap(self, records: StepRecords) -> tuple[float, float, float, float]:
        """The engine thread beside the trainer over this step: its wall, and the seconds
        the engine was busy, the trainer was (verifying, and from its batch to now), and both
        at once."""
        now = time.perf_counter()
        engine = clipped(self.engine_thread.take_busy(), records.started, now)
        trainer = [*records.trainer_busy, (records.batch_ready, now)]
        both = both_busy_seconds(engine, trainer)
        return now - records.started, busy_seconds(engine), busy_seconds(trainer), both

    def sync_weights(self, step: int, skip: bool) -> SyncRecord:
        """The new weights to the engine, then the probe check (skipped: nothing sent). Every
        rank takes part: a sharded model's tensors are gathered one at a time as rank 0 sends
        them, and its probe forward needs every rank too."""
        start = time.perf_counter()
        gap, probe_steps = None, []
        if not skip:
            model = self.trainer.accelerator.unwrap_model(self.trainer.model)
            if self.world.main and self.engine_thread is not None:
                self._send_weights(model, step)
                gap = self.engine_thread.last_gap  # (of the last update landed so far)
                return SyncRecord(seconds=time.perf_counter() - start, gap=gap, engine_steps=[])
            tensors = WeightStream(model, self.config.model.dtype)
            if self.world.main and self.asynchronous:  # between two tokens of every sequence
                keep_kv = self.config.rollout.keep_kv
                self.engine.load_weights_in_flight(tensors, step, recompute_kv=not keep_kv)
            elif self.world.main:
                self.engine.load_weights(tensors, version=step)
            else:
                for _ in tensors:  # its part of each gather
                    pass
            probe = self.probe.tolist()
            trainer_probe = probe_logprobs_of(model, probe)
            if self.world.main:
                tolerance = self.config.vllm.sync_check_tolerance
                gap = check_weight_sync(self.engine, probe, trainer_probe, tolerance, step)
                probe_steps = self.engine.take_trace()
        return SyncRecord(seconds=time.perf_counter() - start, gap=gap, engine_steps=probe_steps)

    def _send_weights(self, model: PreTrainedModel, step: int) -> None:
        """To the engine's thread: a copy of the weights (training goes on), landing at its
        next step boundary, then the probe check there."""
        weights = [(n, t.clone()) for n, t in WeightStream(model, self.config.model.dtype)]
        probe, tolerance = self.probe.tolist(), self.config.vllm.sync_check_tolerance
        trainer_probe = probe_logprobs_of(model, probe)

        def check(engine: RolloutEngine) -> float:
            return check_weight_sync(engine, probe, trainer_probe, tolerance, step)

        self.engine_thread.send_weights(weights, step, check)

    def verify_cache(self, step: int) -> CacheCheck:
        """The cache under the new policy, every rank scoring a part: verified if the method
        does (rank 0), else measured (cache_check.py). Empty on the other ranks. Asynchronous
        training verifies before training instead (verify_in_flight): its checks of the step."""
        if self.asynchronous:
            checks, self.async_checks = self.async_checks, []
            return CacheCheck.merged(checks)
        cached = cached_unfinished(self.state.cache) if self.world.main else None
        check = CacheCheck()
        with Clock() as scoring:
            current = self.world.score(cached, self.trainer.current_logprobs)
            if self.world.main:
                verify = self.config.verify
                check = check_cache(cached, current, self.method, verify, self.monitor, step)
        # (check.scored: the work of the trajectories as verification left them)
        self.records.scoring.add(self.method.verify, scoring.seconds, check.scored)
        return check

    def evaluate(self) -> Evaluation:
        """Every eval set at once (rollverify/tasks/evaluation.py); its time is the eval phase.
        Asynchronous training: the sequences in flight wait outside the engine meanwhile."""
        if self.engine_thread is not None:
            with self.engine_thread.held():
                return self._evaluate()
        if self.asynchronous:
            self.async_state.take_out(self.engine)
        return self._evaluate()

    def _evaluate(self) -> Evaluation:
        counted_apart = getattr(self.engine, "counted_apart", nullcontext)  # its tool calls
        with self.booking.phase("eval", self.version, self.engine), counted_apart():
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

    # -- the checkpoint contract (checkpoint_client.py writes them) --------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything of the loop's own a resumed run needs, by owner. Tensors only under
        rollout.cache.tensors; the rest is JSON-able. Asynchronous training: the engine's
        sequences are taken out first (the next rollout submits them again, in order)."""
        if self.engine_thread is not None:
            with self.engine_thread.held():
                return self._state_dict()
        if self.asynchronous:
            self.async_state.take_out(self.engine)
        return self._state_dict()

    def _state_dict(self) -> dict[str, Any]:
        rollout = self.async_state if self.asynchronous else self.state
        held = {} if self.engine_thread is None else {"engine_rng": self.engine.sampling_state()}
        return held | {
            "task": self.task.state_dict(),
            "rollout": rollout.state_dict(),
            "monitor": self.monitor.state_dict(),
            "ledger": self.booking.ledger.state_dict(),
            "loop": self.counters.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], step: int) -> None:
        """Continue from a checkpoint of `step` (the trainer's state comes back through its
        resume hooks, training/trl_adapter.py)."""
        self.task.load_state_dict(state["task"])
        if self.asynchronous:
            self.async_state = AsyncState.from_state_dict(state["rollout"])
        else:
            self.state.load_state_dict(state["rollout"])
        self.monitor.load_state_dict(state["monitor"])
        self.booking.ledger.load_state_dict(state["ledger"])
        self.counters.load_state_dict(state["loop"])
        self.booking.resumed(self.run_dir, step)


class LoopCallback(TrainerCallback):
    """TRL's step boundaries, handed to the loop: after the update, then the log and the
    checkpoint (after the log, so a resumed run draws the random numbers this one would).
    A step is logged once, the first time TRL logs at a new `global_step`."""

    def __init__(self, loop: TrainingLoop, logged_step: int = 0, resuming: bool = False):
        self.loop = loop
        self.logged_step = logged_step
        self.resuming = resuming

    def on_train_begin(self, args, state, control, **kwargs):
        self.loop.checkpoints.at_train_begin(resuming=self.resuming)

    def on_step_begin(self, args, state, control, **kwargs):
        self.loop.begin_step()

    def on_step_end(self, args, state, control, **kwargs):
        kill_point("train", state.global_step)  # tests: optimizer stepped, nothing synced
        self.loop.after_update(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.global_step <= self.logged_step:  # the end-of-training summary, or a repeat
            return
        self.logged_step = state.global_step
        self.loop.log(state.global_step, logs or {})
        self.loop.checkpoints.at_step_end(state.global_step)
