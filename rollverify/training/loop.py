"""One training step of GRPO with (verified) partial rollout, in the order it runs.

TRL drives the loop; these are the parts that are ours:

    rollout()        TRL's rollout_func: resume the cache, collect B complete groups,
                     score their OPS, filter (filter methods), hand TRL the tokens + behavior
                     log-probs
    reward()         TRL's reward function: the task's verifier on each completion
    -- TRL: group advantages -> clipped surrogate with pi/mu_behavior -> optimizer step --
    after_update()   TRL's on_step_end: weight sync -> verify the cache (rollverify methods)
                     -> switch if acceptance collapsed -> evaluate when due
    log()            TRL's on_log: one batched call with the step's metrics (docs/metrics.md)
    checkpoint()     every train.checkpoint_every steps, at the end, and when asked to stop:
                     everything needed to continue (training/checkpointing.py)

A stop request (SIGINT/SIGTERM, training/stopping.py) pauses a rollout at once, its tokens
kept in the cache, or lets a training step finish; then a checkpoint is written and the run
raises RunInterrupted.
"""

from __future__ import annotations

import itertools
import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from rollverify.atomic import atomic_write_text
from rollverify.checkpoint import save as save_checkpoint
from rollverify.config import RunConfig
from rollverify.costmodel import GPUS, ModelShape, Pricing
from rollverify.engines.protocol import RolloutEngine, SyncCheckError, probe_logprobs_of
from rollverify.evaluation import evaluate
from rollverify.faults import kill_point
from rollverify.filters import keep_fresh, keep_on_policy, staleness
from rollverify.guards import require_finite
from rollverify.ledger import CostLedger
from rollverify.methods import Method
from rollverify.ops import sequence_ops, token_ops
from rollverify.rollout import RolloutInterrupted, RolloutResult, RolloutState, collect
from rollverify.switching import AcceptanceMonitor
from rollverify.tasks.base import Task
from rollverify.trace import EngineStep, StepTrace, TrainerStep, scoring_work
from rollverify.tracking import Tracker
from rollverify.training.checkpointing import capture
from rollverify.training.stopping import RunInterrupted, StopRequest
from rollverify.trajectory import PaddedTrajectories, Trajectory
from rollverify.verify import verify


@dataclass
class CacheCheck:
    """What one verification cycle (or, without verification, one look) found in the cache."""

    trajectories: int = 0
    tokens_before: int = 0
    tokens_kept: int = 0
    ops_before: float = math.nan  # mean sequence OPS of cached trajectories, before truncation
    ops_after: float = math.nan  # ... of their kept prefixes (empty prefixes excluded)
    scored: tuple[int, int] = (0, 0)  # (tokens, attended) of the forward that scored them


@dataclass
class StepWork:
    """What a step ran, for the cost model: filled as the step goes, priced after the update.

    scored / measured: (tokens, attended) run forward-only for the method / for the logs."""

    rollout: list[EngineStep] = field(default_factory=list)
    scored: list[int] = field(default_factory=lambda: [0, 0])
    measured: list[int] = field(default_factory=lambda: [0, 0])


@dataclass
class StepMetrics:
    """The metrics of one step, filled as the step goes; names are the logged names."""

    values: dict[str, float] = field(default_factory=dict)

    def add(self, **metrics: float) -> None:
        self.values.update(metrics)


class TrainingLoop:
    def __init__(
        self,
        config: RunConfig,
        method: Method,
        task: Task,
        engine: RolloutEngine,
        tracker: Tracker,
        on_step: Callable[[int, dict[str, float]], None] = lambda step, metrics: None,
        run_dir: Path | None = None,
        stop: StopRequest | None = None,
    ) -> None:
        self.config, self.method, self.task, self.engine = config, method, task, engine
        self.tracker, self.on_step, self.run_dir = tracker, on_step, run_dir
        self.stop = stop if stop is not None else StopRequest()
        # What each step's work would cost on GPUs (rollverify/costmodel.py): modeled_* metrics.
        self.pricing = Pricing(
            ModelShape.of(config.model_path()), GPUS[config.cost.gpu], config.cost_layout()
        )
        self.ledger = CostLedger(config.device_layout(), modeled_gpus=self.pricing.layout.gpus)
        self.trace = StepTrace()  # written to RUN/trace/ with each checkpoint
        self.work = StepWork()
        engine.take_trace()  # a reused engine's steps were another run's
        self.state = RolloutState()
        self.monitor = AcceptanceMonitor(config.verify.window, config.verify.switch_threshold)
        self.eval_problems = task.eval_problems()
        # A fixed token sequence to compare engine and trainer after each weight sync.
        self.probe = torch.cat([p.prompt_ids for p in self.eval_problems[:8]])[:64]
        self.trainer: Any = None  # set by attach(); the loop calls back into it for scoring
        self.metrics = StepMetrics()
        self.device_seconds = 0.0
        self.step_started = 0.0
        self.last_eval: float | None = None
        self.eval_before: float = math.nan  # accuracy of the base model, step 0
        self.first_metrics: dict[str, float] = {}  # each metric's first logged value
        self.eval_pending = False  # an evaluation a stop skipped: a resumed run does it first
        self.checkpointed_step: int | None = None  # the step of the last checkpoint written
        self.last_rollout: RolloutResult | None = None  # the batch being trained, for inspection

    def attach(self, trainer: Any) -> None:
        self.trainer = trainer

    def counters(self) -> dict[str, Any]:
        """The loop's own running figures, for a checkpoint (JSON-able)."""
        return {
            "device_seconds": self.device_seconds,
            "last_eval": self.last_eval,
            "eval_before": self.eval_before,
            "first_metrics": self.first_metrics,
            "eval_pending": self.eval_pending,
        }

    def load_counters(self, counters: dict[str, Any]) -> None:
        self.device_seconds = counters["device_seconds"]
        self.last_eval = counters["last_eval"]
        self.eval_before = counters["eval_before"]
        self.first_metrics = dict(counters["first_metrics"])
        self.eval_pending = counters["eval_pending"]

    @property
    def version(self) -> int:
        return self.engine.version

    @property
    def partial(self) -> bool:
        """Partial rollout until the monitor switches the run to on-policy, for good."""
        return self.method.partial and not self.monitor.switched

    # -- rollout ------------------------------------------------------------------------------

    def rollout(self, prompts: list, trainer: Any) -> dict[str, list]:
        self.metrics = StepMetrics()
        self.work = StepWork()
        self.step_started = time.perf_counter()
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
            self.stop_here()
        self.last_rollout = result
        self.ledger.add_phase("rollout", result.seconds)
        self.work.rollout = self.engine.take_trace()
        trajectories = list(result.trajectories())
        batch = PaddedTrajectories.of(trajectories)
        require_finite("behavior log-probs from the engine", batch.behavior_logprobs, batch.mask)
        start = time.perf_counter()
        current = self.trainer.current_logprobs(trajectories)
        require_finite("log-probs under the current policy", current, batch.mask)
        ops = token_ops(
            current, batch.behavior_logprobs, self.config.verify.ops_metric, mask=batch.mask
        )
        batch_ops = sequence_ops(ops, batch.mask)
        # The OPS filter acts on this score (its cost); every other method only logs it.
        self._book_scoring(
            time.perf_counter() - start,
            used=self.method.sample_filter == "ops",
            work=_forward_work(trajectories),
        )
        keep = self._keep(batch, batch_ops)
        lengths = batch.mask.sum(-1).float()
        self.ledger.add_tokens(
            generated=result.tokens_generated,
            regenerated=result.tokens_regenerated,
            kept=int(lengths[keep].sum()),
            discarded=int(lengths[~keep].sum()),
        )
        self.metrics.add(
            ops_mean=batch_ops.mean().item(),
            response_length_mean=lengths.mean().item(),
            response_length_p99=torch.quantile(lengths, 0.99).item(),
            staleness_mean=staleness(batch.versions, batch.mask, self.version)
            .float()
            .mean()
            .item(),
            tokens_generated=float(result.tokens_generated),
            tokens_discarded=float(lengths[~keep].sum().item()),
            samples_dropped=float((~keep).sum().item()),
            resumed=float(result.resumed),
            paused=float(result.paused),
            cache_size=float(len(self.state.cache)),
            engine_restarts=float(self.engine.stats.restarts),
            rollout_seconds=result.seconds,
        )
        answers = [a for a, group in zip(result.answers, result.groups, strict=True) for _ in group]
        output: dict[str, list] = {
            "prompt_ids": [t.prompt_ids.tolist() for t in trajectories],
            "completion_ids": [t.token_ids.tolist() for t in trajectories],
            "logprobs": [t.behavior_logprobs.tolist() for t in trajectories],
            "answer": answers,
            "keep": keep.tolist(),
        }
        if self.method.sample_filter is not None:  # dropped samples: no tokens in the loss
            output["env_mask"] = [
                [int(k)] * len(t) for k, t in zip(keep.tolist(), trajectories, strict=True)
            ]
        return output

    def _book_scoring(self, seconds: float, used: bool, work: tuple[int, int]) -> None:
        """Scoring under the current policy: the method's own cost if it acts on the scores
        (verify phase), else measurement for the logs, left out of the run's cost."""
        if used:
            self.ledger.add_phase("verify", seconds)
        else:
            self.ledger.add_measurement(seconds)
        total = self.work.scored if used else self.work.measured
        total[0], total[1] = total[0] + work[0], total[1] + work[1]
        key = "verify_seconds" if used else "measure_seconds"
        self.metrics.add(**{key: self.metrics.values.get(key, 0.0) + seconds})

    def _keep(self, batch: PaddedTrajectories, batch_ops: torch.Tensor) -> torch.Tensor:
        bound = self.config.verify
        if self.method.sample_filter == "staleness":
            return keep_fresh(batch.versions, batch.mask, self.version, bound.staleness_bound)
        if self.method.sample_filter == "ops":
            return keep_on_policy(batch_ops, bound.ops_bound)
        return torch.ones(batch.mask.shape[0], dtype=torch.bool)

    # -- reward -------------------------------------------------------------------------------

    def reward(
        self, completions: list[str], answer: list[str], keep: list[bool], **_: Any
    ) -> list[float | None]:
        rewards = [self.task.reward(text, a) for text, a in zip(completions, answer, strict=True)]
        require_finite("rewards", torch.tensor(rewards, dtype=torch.float64))
        self.metrics.add(reward_mean=sum(rewards) / len(rewards))
        # None = unscorable to TRL: out of the group baseline, advantage 0 (a dropped sample).
        return [r if k else None for r, k in zip(rewards, keep, strict=True)]

    # -- after the optimizer step -------------------------------------------------------------

    def after_update(self, step: int) -> None:
        scored = self.metrics.values.get("verify_seconds", 0.0) + self.metrics.values.get(
            "measure_seconds", 0.0
        )  # the batch's scoring, booked on its own
        train_seconds = (
            time.perf_counter()
            - self.step_started
            - self.metrics.values["rollout_seconds"]
            - scored
        )
        start = time.perf_counter()
        # Stopping before the last step: the engine is not needed again (a resumed run syncs
        # it first, and evaluates then if an evaluation was due), and its processes may have
        # the signal too (Ctrl-C reaches the process group).
        stopping = self.stop.requested and step < self.config.train.steps
        if not stopping:
            model = self.trainer.accelerator.unwrap_model(self.trainer.model)
            self.engine.load_weights(model.state_dict().items(), version=step)
            self.check_weight_sync(step)
            self.trace.add_engine_steps(step, "sync", self.engine.take_trace())  # the probe
        sync_seconds = time.perf_counter() - start

        start = time.perf_counter()
        check = self.check_cache(step)
        self._book_scoring(time.perf_counter() - start, used=self.method.verify, work=check.scored)
        for phase, seconds in [("train", train_seconds), ("sync", sync_seconds)]:
            self.ledger.add_phase(phase, seconds)
        self.price(step, synced=not stopping)
        self.ledger.add_tokens(discarded=check.tokens_before - check.tokens_kept)
        verify_seconds = self.metrics.values.get("verify_seconds", 0.0)
        self.device_seconds += (
            self.metrics.values["rollout_seconds"] + train_seconds + sync_seconds + verify_seconds
        )
        self.metrics.add(
            train_seconds=train_seconds,
            sync_seconds=sync_seconds,
            verify_seconds=verify_seconds,
            measure_seconds=self.metrics.values.get("measure_seconds", 0.0),
            device_seconds=self.device_seconds,
            ops_cache_before=check.ops_before,
            ops_cache_after=check.ops_after,
            cache_tokens_verified=float(check.tokens_before),
            tokens_discarded=self.metrics.values["tokens_discarded"]
            + check.tokens_before
            - check.tokens_kept,
            acceptance_rate=(
                check.tokens_kept / check.tokens_before
                if self.method.verify and check.tokens_before
                else math.nan
            ),
            acceptance_window_mean=(
                self.monitor.window_mean if self.monitor.window_mean is not None else math.nan
            ),
            switched=float(self.monitor.switched),
        )
        due = self.scheduled(step, self.config.train.eval_every)
        if due and not stopping:
            self.metrics.add(eval_accuracy=self.evaluate())
        self.eval_pending = due and stopping
        self.metrics.add(**self.ledger.metrics())
        if self.run_dir is not None:  # stored with the run, current after every step
            atomic_write_text(
                self.run_dir / "ledger.json", json.dumps(self.ledger.to_dict(), indent=2) + "\n"
            )

    def check_weight_sync(self, step: int) -> None:
        """The engine must now score a fixed probe sequence as the trainer does, or stop."""
        engine = self.engine.probe_logprobs(self.probe.tolist())  # [replicas, T-1]
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        trainer = probe_logprobs_of(model, self.probe.tolist())[None]
        gap = (engine - trainer).abs().max().item()
        self.metrics.add(sync_logprob_gap=gap)
        if not gap <= self.config.vllm.sync_check_tolerance:
            raise SyncCheckError(
                f"weight sync check failed after step {step}: engine and trainer log-probs of "
                f"the probe differ by {gap:.2e} > vllm.sync_check_tolerance "
                f"{self.config.vllm.sync_check_tolerance:g}; the engine would sample from a "
                "policy other than the one being trained"
            )

    def check_cache(self, step: int) -> CacheCheck:
        """Score the cached unfinished trajectories under the new policy; verify if the method
        does (truncate, count acceptance, maybe switch); otherwise only measure their OPS."""
        cached = [t for t in self.state.cache if not t.finished and len(t) > 0]
        if not cached:
            return CacheCheck()
        batch = PaddedTrajectories.of(cached)
        current = self.trainer.current_logprobs(cached)
        cfg = self.config.verify
        ops = token_ops(current, batch.behavior_logprobs, cfg.ops_metric, mask=batch.mask)
        lengths = batch.mask.sum(-1)
        kept = lengths
        if self.method.verify:
            dt = cfg.dt if self.method.token_stage else math.inf
            kept = verify(ops, batch.versions, batch.mask, cfg.ds, dt)
            for trajectory, k in zip(cached, kept.tolist(), strict=True):
                trajectory.truncate(k)
            if self.method.switching:
                self.monitor.update(kept.sum(), lengths.sum(), step=step)
        kept_mask = batch.mask & (torch.arange(batch.mask.shape[1]) < kept[:, None])
        nonempty = kept > 0
        return CacheCheck(
            trajectories=len(cached),
            tokens_before=int(lengths.sum()),
            tokens_kept=int(kept.sum()),
            ops_before=sequence_ops(ops, batch.mask).mean().item(),
            ops_after=(
                sequence_ops(ops, kept_mask)[nonempty].mean().item() if nonempty.any() else math.nan
            ),
            scored=_forward_work(cached),
        )

    def price(self, step: int, synced: bool) -> None:
        """Model this step's work on the configured GPUs (ledger: modeled_*), and trace it."""
        trained = _forward_work(list(self.last_rollout.trajectories()))
        if self.config.train.beta > 0:  # TRL scores the batch under the reference model too
            self.work.scored = [a + b for a, b in zip(self.work.scored, trained, strict=True)]
        trainer = TrainerStep(
            *trained,
            *self.work.scored,
            *self.work.measured,
            sync_bytes=self.pricing.shape.weight_bytes if synced else 0,
            completions=tuple(len(t) for t in self.last_rollout.trajectories()),
        )
        self.ledger.add_modeled(self.pricing.step(self.work.rollout, trainer))
        self.trace.add_engine_steps(step, "rollout", self.work.rollout)
        self.trace.add_trainer_step(step, trainer)

    def evaluate(self) -> float:
        start = time.perf_counter()
        self.last_eval = evaluate(
            self.engine,
            self.task,
            self.eval_problems,
            samples=self.config.task.eval_samples,
            seed=self.config.task.eval_seed,
        )
        self.ledger.add_phase("eval", time.perf_counter() - start)
        steps = self.engine.take_trace()
        self.ledger.add_modeled({"eval": self.pricing.engines(steps)})
        self.trace.add_engine_steps(self.version, "eval", steps)
        return self.last_eval

    # -- log ----------------------------------------------------------------------------------

    def log(self, step: int, trl_logs: dict[str, float]) -> None:
        if "entropy" in trl_logs:
            self.metrics.add(entropy_mean=trl_logs["entropy"])
        values = dict(self.metrics.values)
        self.tracker.log_metrics(values, step=step)
        self.first_metrics.update({k: v for k, v in values.items() if k not in self.first_metrics})
        self.on_step(step, values)

    # -- checkpoint ---------------------------------------------------------------------------

    def scheduled(self, step: int, every: int) -> bool:
        """Evaluations and checkpoints: every `every` steps (0: never) and at the last."""
        return step == self.config.train.steps or bool(every and step % every == 0)

    def checkpoint(self) -> Path | None:
        """Write a checkpoint of the step just finished (its time is a ledger phase). A write
        that fails (a full disk) is reported and training goes on: the older ones are kept."""
        start = time.perf_counter()
        step = self.trainer.state.global_step
        try:
            self.trace.flush(self.run_dir / "trace", step)  # its steps, once: before the save
            folder = save_checkpoint(
                self.run_dir / "checkpoints",
                capture(self, self.trainer, self.tracker.run_id, self.tracker.uri),
                keep=self.config.train.keep_checkpoints,
            )
        except OSError as error:
            warnings.warn(f"checkpoint of step {step} not written: {error}", stacklevel=2)
            return None
        finally:
            self.ledger.add_phase("checkpoint", time.perf_counter() - start)
        self.checkpointed_step = step
        return folder

    def stop_here(self) -> None:
        """Save where the run is (unless just saved) and stop it: RunInterrupted."""
        step = self.trainer.state.global_step
        saved = self.checkpointed_step == step
        if not saved:
            saved = self.checkpoint() is not None
        raise RunInterrupted(step, self.run_dir if saved else None)


class LoopCallback(TrainerCallback):
    """Hands TRL's step boundaries to the loop: after the update, then the log and the
    checkpoint (after the log, so a resumed run draws the random numbers this one would)."""

    def __init__(self, loop: TrainingLoop, logged_step: int = -1, resuming: bool = False):
        self.loop = loop
        self.logged_step = logged_step
        self.resuming = resuming

    def on_train_begin(self, args, state, control, **kwargs):
        if not self.resuming:  # step 0: a run killed before its first checkpoint resumes too
            self.loop.checkpoint()

    def on_step_end(self, args, state, control, **kwargs):
        kill_point("train", state.global_step)  # tests: optimizer stepped, nothing synced
        self.loop.after_update(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and state.global_step != self.logged_step and "entropy" in logs:
            self.logged_step = state.global_step
            self.loop.log(state.global_step, logs)
            if self.loop.scheduled(state.global_step, self.loop.config.train.checkpoint_every):
                self.loop.checkpoint()
            if self.loop.stop.requested:
                self.loop.stop_here()


def _forward_work(trajectories: list[Trajectory]) -> tuple[int, int]:
    """(tokens, attended) of one forward over prompt + generated tokens of each trajectory."""
    return scoring_work([len(t.prompt_ids) for t in trajectories], [len(t) for t in trajectories])
