"""What each phase of a training step produced: typed records, filled in the order the phases
run and read once, at the end of the step, to assemble its metrics
(rollverify/tracking/metric_names.py)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch

from rollverify.core.switching import AcceptanceMonitor
from rollverify.cost.trace import EngineStep, TrainerStep, scoring_work
from rollverify.rollout.schedules import RolloutResult
from rollverify.rollout.tool_calls import ToolStats, calls_made
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.evaluation import Evaluation
from rollverify.tasks.rewards.checks import CheckCounts
from rollverify.tracking import metric_names as m


@dataclass
class BatchRecord:
    """The rollout phase: B complete groups, scored under the policy about to be updated.

    keep: bool [B*G], the samples a sample filter kept (all True without one)
    ops: float [B*G], each sample's sequence OPS; lengths: float [B*G], generated tokens
    """

    result: RolloutResult
    trajectories: list[Trajectory]
    keep: torch.Tensor
    ops: torch.Tensor
    lengths: torch.Tensor
    staleness_mean: float
    staleness_max: int  # of the oldest token of any trained completion
    token_staleness: tuple[float, float]  # (mean, share >= 8 versions) over the policy's tokens
    mismatch: tuple[float, float]  # (k3, ESS) of pi_old/mu over the batch's tokens
    drift: tuple[float, float]  # (OPS, k3) of its tokens one version old (core/drift.py)
    cache_size: int  # trajectories left in the cache
    engine_restarts: int
    engine_steps: list[EngineStep]  # the rollout's trace, priced after the update
    tool_calls: ToolStats | None = None  # the rollout's (a task with a tool), else None

    @property
    def tokens_dropped(self) -> float:
        """Tokens of samples the filter dropped, of groups dynamic sampling dropped, and of
        cached trajectories the staleness cap dropped (generated, never trained)."""
        result = self.result
        dropped = result.dropped_tokens + result.dropped_stale_tokens
        return float(self.lengths[~self.keep].sum().item()) + dropped


@dataclass
class Scoring:
    """Forward-only passes under the current policy: what the method acts on (`verify`: the
    OPS filter's scores, the cache's verification) and what is only logged (`measure`).
    work: (tokens, attended), for the cost model."""

    verify_seconds: float = 0.0
    measure_seconds: float = 0.0
    verify_work: tuple[int, int] = (0, 0)
    measure_work: tuple[int, int] = (0, 0)

    def add(self, used: bool, seconds: float, work: tuple[int, int]) -> None:
        if used:
            self.verify_seconds += seconds
            self.verify_work = _plus(self.verify_work, work)
        else:
            self.measure_seconds += seconds
            self.measure_work = _plus(self.measure_work, work)

    @property
    def seconds(self) -> float:
        return self.verify_seconds + self.measure_seconds


@dataclass
class CacheCheck:
    """What one verification cycle (or, without verification, one look) found in the cache."""

    trajectories: int = 0
    tokens_before: int = 0
    tokens_kept: int = 0
    tokens_cut_token_stage: int = 0  # of the truncated tokens, those the token stage (dt) cut
    ops_before: float = math.nan  # mean sequence OPS of cached trajectories, before truncation
    ops_after: float = math.nan  # ... of their kept prefixes (empty prefixes excluded)
    scored: tuple[int, int] = (0, 0)  # (tokens, attended) of the forward that scored them
    # verify.ds/dt auto: the (ds, dt) it applied and the per-version drift they came from
    # (core/auto_thresholds.py); None without auto or without a stale token to measure
    auto: tuple[float, float, float] | None = None
    # verify.threshold_grid: what each grid point would have kept of the policy tokens checked
    # (tokens_before), before any cut (core/threshold_grid.py)
    grid: dict[str, int] = field(default_factory=dict)

    @property
    def tokens_truncated(self) -> int:
        return self.tokens_before - self.tokens_kept

    @property
    def tokens_cut_sequence_stage(self) -> int:
        """Truncated tokens the sequence stage (ds) cut: all but the token stage's."""
        return self.tokens_truncated - self.tokens_cut_token_stage

    @classmethod
    def merged(cls, checks: list[CacheCheck]) -> CacheCheck:
        """One record of several cycles (asynchronous training verifies batch by batch): the
        counts summed, the OPS means weighted by trajectories."""
        if len(checks) <= 1:
            return checks[0] if checks else cls()

        def mean(name: str) -> float:
            pairs = [(getattr(c, name), c.trajectories) for c in checks]
            pairs = [(value, weight) for value, weight in pairs if not math.isnan(value)]
            weight = sum(w for _, w in pairs)
            return sum(v * w for v, w in pairs) / weight if weight else math.nan

        scored = (0, 0)
        for check in checks:
            scored = _plus(scored, check.scored)
        return cls(
            trajectories=sum(c.trajectories for c in checks),
            tokens_before=sum(c.tokens_before for c in checks),
            tokens_kept=sum(c.tokens_kept for c in checks),
            tokens_cut_token_stage=sum(c.tokens_cut_token_stage for c in checks),
            ops_before=mean("ops_before"),
            ops_after=mean("ops_after"),
            scored=scored,
            auto=_mean_auto(checks),
            grid={
                label: sum(c.grid.get(label, 0) for c in checks)
                for label in dict.fromkeys(label for c in checks for label in c.grid)
            },
        )


def _mean_auto(checks: list[CacheCheck]) -> tuple[float, float, float] | None:
    """The auto thresholds of several checks, each figure weighted by trajectories."""
    measured = [c for c in checks if c.auto is not None]
    if not measured:
        return None
    weight = sum(c.trajectories for c in measured)
    return tuple(  # type: ignore[return-value]
        sum(c.auto[i] * c.trajectories for c in measured) / weight for i in range(3)
    )


@dataclass
class SyncRecord:
    """The weight sync after the update. gap: the probe's engine-vs-trainer log-prob gap;
    None when the sync was skipped (a stop before the last step)."""

    seconds: float
    gap: float | None
    engine_steps: list[EngineStep] = field(default_factory=list)  # the probe's, traced

    @property
    def synced(self) -> bool:
        return self.gap is not None


@dataclass
class StepRecords:
    """The records of the step in progress, phase by phase."""

    started: float  # perf_counter at the start of the rollout
    batch: BatchRecord | None = None
    reward_mean: float = math.nan
    reward_checks: CheckCounts | None = None  # a task whose reward runs programs, else None
    scoring: Scoring = field(default_factory=Scoring)
    train_seconds: float = 0.0
    sync: SyncRecord | None = None
    cache: CacheCheck = field(default_factory=CacheCheck)
    evaluation: Evaluation | None = None  # when an evaluation was due
    # the engine in a thread of its own: when the trainer had its batch, its busy intervals
    # before (verification), and the step's (wall, engine busy, trainer busy, both at once)
    batch_ready: float | None = None
    trainer_busy: list[tuple[float, float]] = field(default_factory=list)
    overlap: tuple[float, float, float, float] | None = None

    def trainer_step(
        self, generation: BatchRecord, updates: int, beta: float, weight_bytes: int
    ) -> TrainerStep:
        """The trainer's work of this step, for the cost model: its share (1 / updates) of the
        rollout batch trained, scoring the method used and scoring only logged, and the
        weights synced (if they were). The batch's lengths are traced with its rollout."""
        trajectories = generation.trajectories
        tokens, attended = scoring_work(
            [len(t.prompt_ids) for t in trajectories], [len(t) for t in trajectories]
        )
        trained = (tokens // updates, attended // updates)
        scored = self.scoring.verify_work
        if beta > 0:  # TRL scores the batch under the reference model too
            scored = _plus(scored, trained)
        return TrainerStep(
            *trained,
            *scored,
            *self.scoring.measure_work,
            sync_bytes=weight_bytes if self.sync.synced else 0,
            completions=tuple(len(t) for t in trajectories) if self.batch is not None else (),
        )


@dataclass
class RunCounters:
    """The run's running figures across steps (a checkpoint keeps them)."""

    device_seconds: float = 0.0  # rollout + train + sync + verify, cumulative
    last_eval: float | None = None
    eval_before: float = math.nan  # accuracy of the base model, step 0
    first_metrics: dict[str, float] = field(default_factory=dict)  # each metric's first value
    eval_pending: bool = False  # an evaluation a stop skipped: a resumed run does it first

    def remember_first(self, metrics: dict[str, float]) -> None:
        self.first_metrics.update({k: v for k, v in metrics.items() if k not in self.first_metrics})

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)

    def load_state_dict(self, state: dict) -> None:
        self.device_seconds, self.last_eval = state["device_seconds"], state["last_eval"]
        self.eval_before, self.eval_pending = state["eval_before"], state["eval_pending"]
        self.first_metrics = dict(state["first_metrics"])


def step_metrics(
    records: StepRecords,
    *,
    verifies: bool,
    monitor: AcceptanceMonitor,
    device_seconds: float,
    entropy: float | None,
    ledger: dict[str, float],
) -> dict[str, float]:
    """One step's metrics, from its records. `verifies`: the method verifies the cache (the
    acceptance rate is its figure); `ledger`: the ledger's cumulative figures. A step that
    started no rollout (train.updates_per_rollout > 1) has no rollout metrics."""
    batch, cache, scoring, sync = records.batch, records.cache, records.scoring, records.sync
    metrics = _batch_metrics(records) if batch is not None else {}
    metrics |= {
        m.TOKENS_DISCARDED: (batch.tokens_dropped if batch is not None else 0.0)
        + cache.tokens_truncated,
        m.TRAIN_SECONDS: records.train_seconds,
        m.SYNC_SECONDS: sync.seconds,
        m.VERIFY_SECONDS: scoring.verify_seconds,
        m.MEASURE_SECONDS: scoring.measure_seconds,
        m.DEVICE_SECONDS: device_seconds,
        m.OPS_CACHE_BEFORE: cache.ops_before,
        m.OPS_CACHE_AFTER: cache.ops_after,
        m.CACHE_TOKENS_VERIFIED: float(cache.tokens_before),
        m.TOKENS_CUT_SEQUENCE_STAGE: float(cache.tokens_cut_sequence_stage),
        m.TOKENS_CUT_TOKEN_STAGE: float(cache.tokens_cut_token_stage),
        m.ACCEPTANCE_RATE: (
            cache.tokens_kept / cache.tokens_before
            if verifies and cache.tokens_before
            else math.nan
        ),
        m.ACCEPTANCE_WINDOW_MEAN: (
            monitor.window_mean if monitor.window_mean is not None else math.nan
        ),
        m.SWITCHED: float(monitor.switched),
    }
    if cache.tokens_before:  # what each threshold of the grid would have kept of it
        metrics |= {m.threshold_grid(p): k / cache.tokens_before for p, k in cache.grid.items()}
    if sync.synced:
        metrics[m.SYNC_LOGPROB_GAP] = sync.gap
    if cache.auto is not None:  # logged where auto measured something, rather than NaN
        metrics |= dict(zip((m.VERIFY_DS, m.VERIFY_DT, m.DRIFT_CACHE), cache.auto, strict=True))
    if records.evaluation is not None:
        metrics |= evaluation_metrics(records.evaluation)
    if entropy is not None:
        metrics[m.ENTROPY_MEAN] = entropy
    return metrics | ledger


def _drift_metrics(batch: BatchRecord) -> dict[str, float]:
    """The per-version drift, at steps whose batch holds tokens one version old (none in an
    on-policy batch: not logged, rather than NaN)."""
    ops, k3 = batch.drift
    return {} if math.isnan(ops) else {m.DRIFT_OPS: ops, m.DRIFT_K3: k3}


def _batch_metrics(records: StepRecords) -> dict[str, float]:
    """What the step's rollout batch was: its OPS, lengths, staleness, the rollout."""
    batch = records.batch
    result, lengths = batch.result, batch.lengths
    return (
        {
            m.OPS_MEAN: batch.ops.mean().item(),
            m.RESPONSE_LENGTH_MEAN: lengths.mean().item(),
            m.RESPONSE_LENGTH_P99: torch.quantile(lengths, 0.99).item(),
            m.RESPONSE_LENGTH_MEDIAN: torch.quantile(lengths, 0.5).item(),
            m.RESPONSE_LENGTH_P95: torch.quantile(lengths, 0.95).item(),
            m.STALENESS_MEAN: batch.staleness_mean,
            m.STALENESS_MAX: float(batch.staleness_max),
            m.STALENESS_TOKEN_MEAN: batch.token_staleness[0],
            m.STALE_TOKEN_SHARE_8: batch.token_staleness[1],
            m.MISMATCH_KL: batch.mismatch[0],
            m.MISMATCH_ESS: batch.mismatch[1],
            m.TOKENS_GENERATED: float(result.tokens_generated),
            m.SAMPLES_DROPPED: float((~batch.keep).sum().item()),
            m.GROUPS_DROPPED: float(result.dropped_groups),
            m.TRAJECTORIES_DROPPED_STALE: float(result.dropped_stale),
            m.RESUMED: float(result.resumed),
            m.PAUSED: float(result.paused),
            m.CACHE_SIZE: float(batch.cache_size),
            m.ENGINE_RESTARTS: float(batch.engine_restarts),
            m.REWARD_MEAN: records.reward_mean,
            m.ROLLOUT_SECONDS: result.seconds,
        }
        | _tool_metrics(batch)
        | _drift_metrics(batch)
        | _check_metrics(records)
    )


def _tool_metrics(batch: BatchRecord) -> dict[str, float]:
    """A task with a tool: the rollout's calls, and the calls per trained completion."""
    if batch.tool_calls is None:
        return {}
    calls = batch.tool_calls
    return {
        m.TOOL_CALLS: float(calls.calls),
        m.TOOL_ERRORS: float(calls.errors),
        m.TOOL_TIMEOUTS: float(calls.timeouts),
        m.TOOL_SECONDS: calls.seconds,
        m.TOOL_CPU_SECONDS: calls.cpu_seconds,
        m.TOOL_WAIT_SECONDS: calls.waited,
        m.TOOL_CALLS_MEAN: sum(calls_made(t) for t in batch.trajectories) / len(batch.trajectories),
    }


def _check_metrics(records: StepRecords) -> dict[str, float]:
    """A task that runs programs: the ones caught tampering with the reward's checks, and the
    ones (or tool calls) the sandbox failed to run."""
    checks, tools = records.reward_checks, records.batch.tool_calls
    if checks is None and tools is None:
        return {}
    metrics = {
        m.SANDBOX_ERRORS: float(
            (checks.sandbox_errors if checks else 0) + (tools.broken if tools else 0)
        )
    }
    if checks is not None:
        metrics[m.REWARD_TAMPERING] = float(checks.tampering)
    return metrics


def evaluation_metrics(evaluation: Evaluation) -> dict[str, float]:
    """eval_accuracy (the mean over sets of avg@k) and each set's avg@k and pass@k."""
    metrics = {m.EVAL_ACCURACY: evaluation.accuracy}
    for name, score in evaluation.sets.items():
        metrics[m.eval_avg_at_k(name)] = score.avg_at_k
        metrics[m.eval_pass_at_k(name)] = score.pass_at_k
    return metrics


def _plus(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], a[1] + b[1]
