"""One training step of GRPO with (verified) partial rollout, in the order it runs.

TRL drives the loop; these are the parts that are ours, each filling its record of the step
(training/records.py):

    rollout()        TRL's rollout_func: resume the cache, collect B complete groups (with
                     dynamic sampling, groups of tied rewards replaced; with the
                     staleness cap, stale groups restarted), score
                     their OPS, filter (filter methods), reward them (the task's
                     verifier)                                                 -> BatchRecord
                     and hand TRL the tokens + behavior log-probs + rewards
    reward()         TRL's reward function: those rewards (a dropped sample's: None)
    -- TRL: group advantages -> clipped surrogate with pi/mu_behavior -> optimizer step --
    after_update()   TRL's on_step_end, after each optimizer step:
                       sync_weights()  weights to the engine, checked           -> SyncRecord
                       check_cache     verify the cache (rollverify methods), switch if
                                       acceptance collapsed                    -> CacheCheck
                       book()          the step's phases and modeled cost, in the ledger
                       evaluate()      when due
    log()            TRL's on_log, once per optimizer step (by TRL's step counter): the
                     step's metrics, assembled from its records (docs/metrics.md)
    checkpoint()     every train.checkpoint_every steps, at the end, and when asked to stop:
                     everything needed to continue (training/checkpoint/run_state.py)

A stop request (SIGINT/SIGTERM, training/stopping.py) pauses a rollout at once (its tokens
kept in the cache) or lets a training step finish; a checkpoint, then RunInterrupted.

In a run of several processes (training/distributed/world.py) rank 0 does all of the above but
the update; the other ranks get their slice of each batch from rank 0 in rollout(), train it,
and join rank 0 for the checkpoints and the decision to stop. TRL calls these parts through
LoopCallback (at the end of this file) and the trainer build_trainer makes (trl_adapter.py).
"""

from __future__ import annotations

import itertools
import json
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import CheckpointException
from transformers import PreTrainedModel, TrainerCallback

from rollverify.config import RunConfig
from rollverify.core.corrections import mismatch
from rollverify.core.filters import keep_samples, staleness
from rollverify.core.methods import Method
from rollverify.core.off_policy_shift import sequence_ops, token_ops
from rollverify.core.switching import AcceptanceMonitor
from rollverify.cost.costmodel import GPUS, Layout, ModelShape, Pricing
from rollverify.cost.ledger import CostLedger, DeviceLayout
from rollverify.cost.trace import StepTrace, drop_after
from rollverify.infra.atomic_write import atomic_write_text
from rollverify.infra.faults import kill_point
from rollverify.rollout.dynamic_sampling import tie_filter
from rollverify.rollout.engines.protocol import RolloutEngine, probe_logprobs_of
from rollverify.rollout.schedules import RolloutInterrupted, RolloutResult, RolloutState, collect
from rollverify.rollout.trajectory import PaddedTrajectories, Trajectory
from rollverify.tasks.base import Task
from rollverify.tasks.evaluation import Evaluation, evaluate_sets
from rollverify.tracking.metric_names import trl_metrics
from rollverify.tracking.tracker import Tracker
from rollverify.training.cache_check import cached_unfinished, check_cache, forward_work
from rollverify.training.checkpoint.background_write import BackgroundWrite, detached
from rollverify.training.checkpoint.files import save as save_checkpoint
from rollverify.training.checkpoint.run_state import capture, rng_parts, whole_state
from rollverify.training.checkpoint.sharded import write_parts
from rollverify.training.distributed.world import World
from rollverify.training.guards import require_finite
from rollverify.training.records import (
    BatchRecord,
    RunCounters,
    StepRecords,
    SyncRecord,
    step_metrics,
)
from rollverify.training.schedule import Schedule
from rollverify.training.stopping import RunInterrupted, StopRequest
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
        # What each step's work would cost on GPUs (rollverify/cost/costmodel/): modeled_* metrics.
        self.pricing = Pricing(
            ModelShape.of(config.model_path()), GPUS[config.cost.gpu], Layout.of(config)
        )
        self.ledger = CostLedger(DeviceLayout.of(config), modeled_gpus=self.pricing.layout.gpus)
        self.trace = StepTrace()  # written to RUN/trace/ with each checkpoint
        if engine is not None:
            engine.take_trace()  # a reused engine's steps were another run's
        self.state = RolloutState()
        self.monitor = AcceptanceMonitor(config.verify.window, config.verify.switch_threshold)
        self.eval_sets = task.eval_sets()
        # A fixed token sequence to compare engine and trainer after each weight sync.
        self.probe = torch.cat([p.prompt_ids for p in task.eval_problems()[:8]])[:64]
        self.records = StepRecords(started=time.perf_counter())  # of the step in progress
        self.counters = RunCounters()  # the run's own running figures
        self.last_metrics: dict[str, float] = {}  # the last step's, as logged
        self.checkpointed_step: int | None = None  # the step of the last checkpoint written
        self.checkpoint_seconds = 0.0  # how long the last one took to write (rank 0)
        self.pending_write: BackgroundWrite | None = None  # rank 0's, train.async_checkpoint
        self.pending_step: int | None = None  # the step it is of (every rank)
        self.overlong = overlong_punishment(config.rollout)  # DAPO's length shaping, or None
        self.schedule = Schedule(config.train, start_step)  # when to evaluate, checkpoint, stop
        self.start_step = start_step
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

    @property
    def version(self) -> int:
        return self.engine.version

    @property
    def partial(self) -> bool:
        """Partial rollout until the monitor switches the run to on-policy, for good."""
        return self.method.partial and not self.monitor.switched

    def begin_step(self) -> None:
        """A new optimizer step (TRL's on_step_begin): its records start empty; its rollout,
        if this step starts one (every train.updates_per_rollout steps), fills them."""
        self.records = StepRecords(started=time.perf_counter())

    # -- the checkpoint contract --------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything of the loop's own a resumed run needs, by owner. Tensors only under
        rollout.cache.tensors; the rest is JSON-able."""
        return {
            "task": self.task.state_dict(),
            "rollout": self.state.state_dict(),
            "monitor": self.monitor.state_dict(),
            "ledger": self.ledger.state_dict(),
            "loop": self.counters.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], step: int) -> None:
        """Continue from a checkpoint of `step` (the trainer's state comes back through its
        resume hooks, training/trl_adapter.py)."""
        self.task.load_state_dict(state["task"])
        self.state.load_state_dict(state["rollout"])
        self.monitor.load_state_dict(state["monitor"])
        self.ledger.load_state_dict(state["ledger"])
        self.counters.load_state_dict(state["loop"])
        if self.run_dir is not None:  # steps past the checkpoint are traced again by this run
            drop_after(self.run_dir / "trace", step)

    # -- rollout ------------------------------------------------------------------------------

    def rollout(self, prompts: list, trainer: Any) -> dict[str, list]:
        """TRL's rollout_func (its prompts are ignored: trl_adapter.py says why): rank 0 rolls
        out; every rank scores a part of the batch under the current policy; rank 0 filters
        and rewards it; every rank trains its slice."""
        result = self._collect() if self.world.main else None
        trajectories = list(result.trajectories()) if result is not None else None
        if not self.world.decide(trajectories is not None):  # stopped: its tokens are cached
            self.stop_here()
        start = time.perf_counter()
        current = self.world.score(trajectories, self.trainer.current_logprobs)
        batch = self.batch(result, trajectories, current, time.perf_counter() - start)
        return self.world.share(batch)

    def batch(
        self,
        result: RolloutResult | None,
        trajectories: list[Trajectory] | None,
        current: torch.Tensor | None,
        scoring_seconds: float,
    ) -> dict[str, list] | None:
        """Rank 0: the batch's OPS, filter and rewards, as TRL's rollout_func returns them
        (None on the other ranks)."""
        if not self.world.main:
            return None
        batch = PaddedTrajectories.of(trajectories)
        require_finite("behavior log-probs from the engine", batch.behavior_logprobs, batch.mask)
        current = current[:, : batch.mask.shape[1]]
        require_finite("log-probs under the current policy", current, batch.mask)
        ops = token_ops(
            current, batch.behavior_logprobs, self.config.verify.ops_metric, mask=batch.mask
        )
        batch_ops = sequence_ops(ops, batch.mask)
        # The OPS filter acts on this score (its cost); every other method only logs it.
        self._book_scoring(
            scoring_seconds,
            used=self.method.sample_filter == "ops",
            work=forward_work(trajectories),
        )
        keep = keep_samples(
            self.method.sample_filter, batch, batch_ops, self.version, self.config.verify
        )
        lengths = batch.mask.sum(-1).float()
        self.ledger.add_tokens(
            generated=result.tokens_generated,
            regenerated=result.tokens_regenerated,
            kept=int(lengths[keep].sum()),
            discarded=int(lengths[~keep].sum())
            + result.dropped_tokens
            + result.dropped_stale_tokens,
        )
        self.records.batch = self.generation = BatchRecord(
            result=result,
            trajectories=trajectories,
            keep=keep,
            ops=batch_ops,
            lengths=lengths,
            staleness_mean=staleness(batch.versions, batch.mask, self.version)
            .float()
            .mean()
            .item(),
            mismatch=mismatch(current, batch.behavior_logprobs, batch.mask),  # current = pi_old
            cache_size=len(self.state.cache),
            engine_restarts=self.engine.stats.restarts,
            engine_steps=self.engine.take_trace(),
        )
        output = rollout_output(result, keep, mask_dropped=self.method.sample_filter is not None)
        output["reward"] = self._rewards(output["completion_ids"], output["answer"])
        return output

    def _collect(self) -> RolloutResult | None:
        """B complete groups from the engine; None if a stop request paused the rollout."""
        rollout = self.config.rollout
        polls = itertools.count()

        def stop_now() -> bool:
            if next(polls) == 10:  # tests only: a kill in the middle of this rollout
                kill_point("rollout", self.version + 1)
            return self.stop.requested

        try:
            result = collect(
                self.engine,
                self.task,
                self.state,
                batch_groups=rollout.batch_groups,
                group_size=rollout.group_size,
                partial=self.partial,
                max_inflight_groups=rollout.max_inflight_groups,
                should_stop=stop_now,
                drop_group=tie_filter(self._group_rewards),
                max_drops=rollout.dynamic_sampling_max_drops,
                max_staleness=rollout.max_staleness,
            )
        except RolloutInterrupted as interrupted:  # its tokens are in the cache: save, stop
            self.ledger.add_phase("rollout", interrupted.seconds)
            steps = self.engine.take_trace()
            self.ledger.add_modeled({"rollout": self.pricing.engines(steps)})
            self.trace.add_engine_steps(self.version + 1, "rollout", steps)
            self.ledger.add_tokens(
                generated=interrupted.tokens_generated,
                regenerated=interrupted.tokens_regenerated,
            )
            return None
        self.ledger.add_phase("rollout", result.seconds)
        return result

    def _book_scoring(self, seconds: float, used: bool, work: tuple[int, int]) -> None:
        """Scoring under the current policy: the method's own cost if it acts on the scores
        (verify phase), else measurement for the logs, left out of the run's cost."""
        if used:
            self.ledger.add_phase("verify", seconds)
        else:
            self.ledger.add_measurement(seconds)
        self.records.scoring.add(used, seconds, work)

    # -- reward -------------------------------------------------------------------------------

    def _rewards(self, completion_ids: list[list[int]], answers: list[str]) -> list[float]:
        """The task's verifier on every completion (plus DAPO's overlong punishment,
        rollout.overlong_buffer)."""
        rewards = self._task_rewards(completion_ids, answers)
        if self.overlong is not None:
            rewards = [r + p for r, p in zip(rewards, self.overlong(completion_ids), strict=True)]
        require_finite("rewards", torch.tensor(rewards, dtype=torch.float64))
        self.records.reward_mean = sum(rewards) / len(rewards)
        return rewards

    def _task_rewards(self, completion_ids: list[list[int]], answers: list[str]) -> list[float]:
        """The task's verifier on completions decoded as TRL decodes them."""
        texts = self.trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        return [self.task.reward(text, a) for text, a in zip(texts, answers, strict=True)]

    def _group_rewards(self, group: list[Trajectory], answer: str) -> list[float]:
        """A complete group's task rewards, for dynamic sampling."""
        return self._task_rewards([t.token_ids.tolist() for t in group], [answer] * len(group))

    def reward(self, reward: list[float], keep: list[bool], **_: Any) -> list[float | None]:
        """TRL's reward function: this rank's slice of the rewards scored at rollout. None =
        unscorable to TRL: out of the group baseline, advantage 0 (a dropped sample)."""
        return [r if k else None for r, k in zip(reward, keep, strict=True)]

    # -- after the optimizer step -------------------------------------------------------------

    def after_update(self, step: int) -> None:
        records = self.records
        # The update's time: since the rollout began, less the rollout and the batch's scoring.
        rollout_seconds = records.batch.result.seconds if records.batch is not None else 0.0
        records.train_seconds = (
            time.perf_counter() - records.started - rollout_seconds - records.scoring.seconds
        )
        # Stopping before the last step: the engine is not needed again (a resumed run syncs
        # it first, and evaluates then if an evaluation was due), and its processes may have
        # the signal too (Ctrl-C reaches the process group).
        stopping = self.stop_requested() and step < self.config.train.steps
        records.sync = self.sync_weights(step, skip=stopping)
        start = time.perf_counter()
        # The cache under the new policy: verified if the method does, else measured.
        cached = cached_unfinished(self.state.cache) if self.world.main else None
        current = self.world.score(cached, self.trainer.current_logprobs)  # every rank a part
        if not self.world.main:  # the rest (verification, ledger, evaluation) is rank 0's
            return
        records.cache = check_cache(
            cached, current, self.method, self.config.verify, self.monitor, step
        )
        self._book_scoring(
            time.perf_counter() - start, used=self.method.verify, work=records.cache.scored
        )
        self.book(step)
        due = self.schedule.evaluation_due(step)
        if due and not stopping:
            records.evaluation = self.evaluate()
        self.counters.eval_pending = due and stopping
        if self.run_dir is not None:  # stored with the run, current after every step
            atomic_write_text(
                self.run_dir / "ledger.json", json.dumps(self.ledger.to_dict(), indent=2) + "\n"
            )

    def sync_weights(self, step: int, skip: bool) -> SyncRecord:
        """The new weights to the engine, then the probe check (skipped: nothing sent). Every
        rank takes part: a sharded model's tensors are gathered one at a time as rank 0 sends
        them, and its probe forward needs every rank too."""
        start = time.perf_counter()
        gap = None
        if not skip:
            model = self.trainer.accelerator.unwrap_model(self.trainer.model)
            tensors = WeightStream(model, self.config.model.dtype)
            if self.world.main:
                self.engine.load_weights(tensors, version=step)
            else:
                for _ in tensors:  # its part of each gather
                    pass
            probe = self.probe.tolist()
            trainer_probe = probe_logprobs_of(model, probe)
            if self.world.main:
                tolerance = self.config.vllm.sync_check_tolerance
                gap = check_weight_sync(self.engine, probe, trainer_probe, tolerance, step)
                self.trace.add_engine_steps(step, "sync", self.engine.take_trace())  # the probe
        return SyncRecord(seconds=time.perf_counter() - start, gap=gap)

    def book(self, step: int) -> None:
        """The step's phases and tokens in the ledger, and its work priced on the configured
        GPUs (modeled_*) and traced."""
        records = self.records
        for phase, seconds in [("train", records.train_seconds), ("sync", records.sync.seconds)]:
            self.ledger.add_phase(phase, seconds)
        self.ledger.add_tokens(discarded=records.cache.tokens_truncated)
        self.counters.device_seconds += (
            (records.batch.result.seconds if records.batch is not None else 0.0)
            + records.train_seconds
            + records.sync.seconds
            + records.scoring.verify_seconds
        )
        trainer = records.trainer_step(
            self.generation,
            self.config.train.updates_per_rollout,
            beta=self.config.train.beta,
            weight_bytes=self.pricing.shape.weight_bytes,
        )
        engine_steps = records.batch.engine_steps if records.batch is not None else []
        self.ledger.add_modeled(self.pricing.step(engine_steps, trainer))
        self.trace.add_engine_steps(step, "rollout", engine_steps)
        self.trace.add_trainer_step(step, trainer)

    def evaluate(self) -> Evaluation:
        """Every eval set at once (rollverify/tasks/evaluation.py); its time is the eval phase."""
        start = time.perf_counter()
        evaluation = evaluate_sets(
            self.engine,
            self.task,
            self.eval_sets,
            samples=self.config.task.eval_samples,
            seed=self.config.task.eval_seed,
        )
        self.counters.last_eval = evaluation.accuracy
        self.ledger.add_phase("eval", time.perf_counter() - start)
        steps = self.engine.take_trace()
        self.ledger.add_modeled({"eval": self.pricing.engines(steps)})
        self.trace.add_engine_steps(self.version, "eval", steps)
        return evaluation

    # -- log ----------------------------------------------------------------------------------

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
            ledger=self.ledger.metrics(),
        )
        values |= trl_metrics(trl_logs)
        self.tracker.log_metrics(values, step=step)
        self.counters.remember_first(values)
        self.last_metrics = values
        self.on_step(step, values)

    # -- checkpoint ---------------------------------------------------------------------------

    def checkpoint(self, background: bool = False) -> None:
        """Write a checkpoint of the step just finished (its time is a ledger phase), with
        every rank's RNG; `background`: from a copy, in a thread, while training goes on
        (background_write.py). A sharded run's ranks first write their parts of the weights
        and moments (checkpoint/sharded.py). A write that fails (a full disk) is reported
        and training goes on: the older ones are kept."""
        self.finish_checkpoint()  # one write at a time
        start = time.perf_counter()
        step = self.trainer.state.global_step
        root, keep = self.run_dir / "checkpoints", self.config.train.keep_checkpoints
        folder, temporary = None, None
        try:
            model = self.trainer.accelerator.unwrap_model(self.trainer.model)
            optimizer = self.trainer.optimizer  # sharded: each rank writes its part first
            temporary = write_parts(self.world, root, step, model, optimizer)  # (a collective)
            whole = whole_state(self.trainer, self.world.gather(rng_parts()))  # (a collective)
            if self.world.main:
                self.trace.flush(self.run_dir / "trace", step)  # its steps, once: before the save
                snapshot = capture(self, self.tracker.run_id, self.tracker.uri, whole)
                if background:
                    self.pending_write = BackgroundWrite(root, detached(snapshot), keep, temporary)
                else:
                    folder = save_checkpoint(root, snapshot, keep=keep, temporary=temporary)
        except (OSError, CheckpointException) as error:
            warnings.warn(f"checkpoint of step {step} not written: {error}", stacklevel=2)
            if temporary is not None and self.world.main:
                shutil.rmtree(temporary, ignore_errors=True)
        finally:
            self.checkpoint_seconds = time.perf_counter() - start
            if self.world.main:
                self.ledger.add_phase("checkpoint", self.checkpoint_seconds)
        if background:
            self.schedule.checkpointed, self.pending_step = step, step
        elif self.world.decide(folder is not None):  # every rank knows what was saved
            self.checkpointed_step = self.schedule.checkpointed = step

    def finish_checkpoint(self) -> None:
        """Wait for a checkpoint being written in the background; then every rank knows
        whether it landed."""
        if self.pending_step is None:
            return
        write, self.pending_write = self.pending_write, None
        folder = write.wait() if write is not None else None
        if write is not None:  # the whole write's time, for a stop's grace
            self.checkpoint_seconds += write.seconds
        if self.world.decide(folder is not None):
            self.checkpointed_step = self.pending_step
        self.pending_step = None

    def last_good_checkpoint(self) -> int:
        """The step `rvctl resume` would continue from: the last checkpoint this process
        wrote, else the one it resumed from (or step 0's)."""
        return self.checkpointed_step if self.checkpointed_step is not None else self.start_step

    def stop_requested(self) -> bool:
        """Rank 0's stop request, on every rank: they stop after the same step."""
        return self.world.decide(self.stop.requested)

    def stop_here(self) -> None:
        """Save where the run is (unless just saved, or the stop's grace would not cover the
        write) and stop it: RunInterrupted."""
        step = self.trainer.state.global_step
        self.finish_checkpoint()
        if self.checkpointed_step != step:
            # Rank 0's call: the last write's time, with a margin, against the grace left.
            if self.world.decide(self.stop.seconds_left() > 1.5 * self.checkpoint_seconds + 1):
                self.checkpoint()
            else:
                last = self.last_good_checkpoint()
                raise RunInterrupted(
                    last,
                    self.run_dir,
                    f"stopped after step {step} without its checkpoint (the last took "
                    f"{self.checkpoint_seconds:.0f} s, more than train.stop_grace_seconds "
                    f"left); steps after {last} are trained again",
                )
        saved = self.checkpointed_step == step
        raise RunInterrupted(step, self.run_dir if saved else None)


def overlong_punishment(rollout) -> Callable[[list[list[int]]], list[float]] | None:
    """TRL's DAPO soft overlong punishment for rollout.overlong_buffer (None: off)."""
    if not rollout.overlong_buffer:
        return None
    from trl.rewards import get_soft_overlong_punishment

    return get_soft_overlong_punishment(rollout.max_new_tokens, rollout.overlong_buffer)


class LoopCallback(TrainerCallback):
    """Hands TRL's step boundaries to the loop: after the update, then the log and the
    checkpoint (after the log, so a resumed run draws the random numbers this one would).
    A step is logged once, the first time TRL logs at a new `global_step`."""

    def __init__(self, loop: TrainingLoop, logged_step: int = 0, resuming: bool = False):
        self.loop = loop
        self.logged_step = logged_step
        self.resuming = resuming

    def on_train_begin(self, args, state, control, **kwargs):
        if not self.resuming:  # step 0: a run killed before its first checkpoint resumes too
            self.loop.checkpoint()

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
        if not self.loop.schedule.between_rollouts(state.global_step):
            return
        # The last step's checkpoint is written before the end; a stop asked for there lets
        # the run finish (its summary written), as it ends anyway.
        last = state.global_step >= self.loop.config.train.steps
        if self.loop.schedule.checkpoint_due(state.global_step):
            self.loop.checkpoint(background=self.loop.config.train.async_checkpoint and not last)
        if self.loop.stop_requested() and not last:
            self.loop.stop_here()
