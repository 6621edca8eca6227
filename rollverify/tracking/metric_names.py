"""The metrics a run logs, by name: the one place the names are written (docs/metrics.md lists
exactly these; tests/test_metrics_doc.py checks it). Dashboards depend on them: add, never
rename.

Pure names, no imports beyond the standard library: reports and plots read them too.
`training/records.py` assembles one step's metrics from the records its phases produced; the
cost ledger builds its cumulative figures with the functions here.
"""

from __future__ import annotations

from collections.abc import Iterable

REWARD_MEAN = "reward_mean"
ENTROPY_MEAN = "entropy_mean"
OPS_MEAN = "ops_mean"
OPS_CACHE_BEFORE = "ops_cache_before"
OPS_CACHE_AFTER = "ops_cache_after"
ACCEPTANCE_RATE = "acceptance_rate"
ACCEPTANCE_WINDOW_MEAN = "acceptance_window_mean"
SWITCHED = "switched"
RESPONSE_LENGTH_MEAN = "response_length_mean"
RESPONSE_LENGTH_P99 = "response_length_p99"
RESPONSE_LENGTH_MEDIAN = "response_length_median"
RESPONSE_LENGTH_P95 = "response_length_p95"
STALENESS_MEAN = "staleness_mean"
STALENESS_MAX = "staleness_max"
STALENESS_TOKEN_MEAN = "staleness_token_mean"
STALE_TOKEN_SHARE_8 = "stale_token_share_8"
TOKENS_GENERATED = "tokens_generated"
TOKENS_DISCARDED = "tokens_discarded"
SAMPLES_DROPPED = "samples_dropped"
GROUPS_DROPPED = "groups_dropped"
TRAJECTORIES_DROPPED_STALE = "trajectories_dropped_stale"
RESUMED = "resumed"
PAUSED = "paused"
ENGINE_RESTARTS = "engine_restarts"
CACHE_SIZE = "cache_size"
CACHE_TOKENS_VERIFIED = "cache_tokens_verified"
TOKENS_CUT_SEQUENCE_STAGE = "tokens_cut_sequence_stage"
TOKENS_CUT_TOKEN_STAGE = "tokens_cut_token_stage"
ROLLOUT_SECONDS = "rollout_seconds"
TRAIN_SECONDS = "train_seconds"
SYNC_SECONDS = "sync_seconds"
VERIFY_SECONDS = "verify_seconds"
MEASURE_SECONDS = "measure_seconds"
DEVICE_SECONDS = "device_seconds"
EVAL_ACCURACY = "eval_accuracy"
SYNC_LOGPROB_GAP = "sync_logprob_gap"
MISMATCH_KL = "mismatch_kl"
MISMATCH_ESS = "mismatch_ess"
DRIFT_OPS = "drift_ops"  # token OPS of the batch's tokens one version old
DRIFT_K3 = "drift_k3"  # their k3
VERIFY_DS = "verify_ds"  # verify.ds auto: the sequence-stage threshold the check applied
VERIFY_DT = "verify_dt"  # ... and the token stage's
DRIFT_CACHE = "drift_cache"  # the per-version drift they came from (core/auto_thresholds.py)
TOOL_CALLS = "tool_calls"
TOOL_ERRORS = "tool_errors"
TOOL_TIMEOUTS = "tool_timeouts"
TOOL_SECONDS = "tool_seconds"
TOOL_CPU_SECONDS = "tool_cpu_seconds"
TOOL_WAIT_SECONDS = "tool_wait_seconds"
TOOL_CALLS_MEAN = "tool_calls_mean"
REWARD_TAMPERING = "reward_tampering"
SANDBOX_ERRORS = "sandbox_errors"

STEP = (
    REWARD_MEAN,
    ENTROPY_MEAN,
    OPS_MEAN,
    OPS_CACHE_BEFORE,
    OPS_CACHE_AFTER,
    ACCEPTANCE_RATE,
    ACCEPTANCE_WINDOW_MEAN,
    SWITCHED,
    RESPONSE_LENGTH_MEAN,
    RESPONSE_LENGTH_P99,
    RESPONSE_LENGTH_MEDIAN,
    RESPONSE_LENGTH_P95,
    STALENESS_MEAN,
    STALENESS_MAX,
    STALENESS_TOKEN_MEAN,
    STALE_TOKEN_SHARE_8,
    TOKENS_GENERATED,
    TOKENS_DISCARDED,
    SAMPLES_DROPPED,
    GROUPS_DROPPED,
    TRAJECTORIES_DROPPED_STALE,
    RESUMED,
    PAUSED,
    ENGINE_RESTARTS,
    CACHE_SIZE,
    CACHE_TOKENS_VERIFIED,
    TOKENS_CUT_SEQUENCE_STAGE,
    TOKENS_CUT_TOKEN_STAGE,
    ROLLOUT_SECONDS,
    TRAIN_SECONDS,
    SYNC_SECONDS,
    VERIFY_SECONDS,
    MEASURE_SECONDS,
    DEVICE_SECONDS,
    EVAL_ACCURACY,
    SYNC_LOGPROB_GAP,
    MISMATCH_KL,
    MISMATCH_ESS,
    DRIFT_OPS,
    DRIFT_K3,
    VERIFY_DS,
    VERIFY_DT,
    DRIFT_CACHE,
    TOOL_CALLS,
    TOOL_ERRORS,
    TOOL_TIMEOUTS,
    TOOL_SECONDS,
    TOOL_CPU_SECONDS,
    TOOL_WAIT_SECONDS,
    TOOL_CALLS_MEAN,
    REWARD_TAMPERING,
    SANDBOX_ERRORS,
)

# What a command shows live, per step: (metric, short label).
LIVE = (
    (REWARD_MEAN, "reward"),
    ("trl/loss", "loss"),  # (TRL_LOSS, TRL_GRAD_NORM, TRL_CLIP_SHARE below)
    ("trl/grad_norm", "grad"),
    ("trl/clip_ratio/region_mean", "clip"),
    (RESPONSE_LENGTH_MEAN, "len"),
    (OPS_MEAN, "OPS"),
    (ACCEPTANCE_RATE, "accept"),
    (EVAL_ACCURACY, "eval"),
)

# The cost ledger's cumulative figures (rollverify/cost/ledger.py): its phases and token kinds
# are part of their names, so they are written here and the ledger books by them.
PHASES = ("rollout", "tool", "eval", "train", "verify", "sync", "checkpoint")
MEASURE = "measure"  # scoring for metrics only: kept apart, not a phase of the run's cost
MODELED_PHASES = ("rollout", "eval", "train", "verify", "sync", MEASURE)
TOKEN_KINDS = ("generated", "kept", "discarded", "regenerated")
COST_DEVICE_SECONDS = "cost_device_seconds"
# measured device-days (a GPU's where the run had GPUs; on a CPU, a process's): never "GPU-days"
COST_DEVICE_DAYS = "cost_device_days"
# Metrics renamed: the new name -> the one stored runs logged it under (read where the new is
# absent; docs/metrics.md, "Renamed")
RENAMED = {COST_DEVICE_DAYS: "cost_gpu_days"}
COST_WALL_SECONDS = "cost_wall_seconds"
COST_TOOL_CPU_SECONDS = "cost_tool_cpu_seconds"  # host CPU, not device time: kept apart
COST_OVERLAP_SECONDS = "cost_overlap_seconds"
COST_ENGINE_IDLE_SHARE = "cost_engine_idle_share"
COST_TRAINER_IDLE_SHARE = "cost_trainer_idle_share"
MODELED_WALL_SECONDS = "modeled_wall_seconds"
MODELED_GPU_DAYS = "modeled_gpu_days"


def cost_device_seconds(phase: str) -> str:
    return f"cost_{phase}_device_seconds"


def tokens_total(kind: str) -> str:
    return f"tokens_{kind}_total"


def modeled_seconds(phase: str) -> str:
    return f"modeled_{phase}_seconds"


# Everything TRL logs for a step (the Trainer's loss, grad norm and learning rate; GRPO's
# clip ratios, KL, completion lengths, rewards, ...), under its own name after "trl/".
TRL_PREFIX = "trl/"
TRL_LOSS = "trl/loss"
TRL_GRAD_NORM = "trl/grad_norm"
TRL_LEARNING_RATE = "trl/learning_rate"
# the share of a step's tokens the PPO clip cut, either side (TRL's clip_ratio/region_mean)
TRL_CLIP_SHARE = "trl/clip_ratio/region_mean"
# the share of a step's tokens a peer correction masked or capped (training/trl_adapter.py)
CORRECTION_TOKEN_SHARE = "trl/correction/token_share"
TRL_NAMES = (
    TRL_LOSS,
    TRL_GRAD_NORM,
    TRL_LEARNING_RATE,
    "trl/kl",
    "trl/entropy",
    "trl/clip_ratio/<region>",
    "trl/completions/<stat>",
    "trl/rewards/<function>/<stat>",
    CORRECTION_TOKEN_SHARE,
    "trl/sampling/importance_sampling_ratio/<stat>",
    "trl/sampling/sampling_logp_difference/<stat>",
    "trl/<name>",
)


def trl_metrics(logs: dict[str, object]) -> dict[str, float]:
    """TRL's numeric logs of a step under trl/<its name>."""
    return {
        f"{TRL_PREFIX}{name}": float(value)
        for name, value in logs.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


# Per eval set (task.eval_sets / task.eval_files), logged with every evaluation.
EVAL_SET_PATTERNS = ("eval/<set>/avg_at_k", "eval/<set>/pass_at_k")
# verify.threshold_grid: the acceptance each grid point would have given at the step's check
THRESHOLD_GRID_PREFIX = "threshold_grid/"
THRESHOLD_GRID_PATTERN = THRESHOLD_GRID_PREFIX + "<point>"


def threshold_grid(point: str) -> str:
    """threshold_grid/<point>: a label of core/threshold_grid.py (ds_0.01, auto_c2_dt_run)."""
    return THRESHOLD_GRID_PREFIX + point


def eval_avg_at_k(eval_set: str) -> str:
    return f"eval/{eval_set}/avg_at_k"


def eval_pass_at_k(eval_set: str) -> str:
    return f"eval/{eval_set}/pass_at_k"


def eval_set_of(name: str) -> str | None:
    """The set a per-set eval metric is of (eval/<set>/...), else None."""
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "eval" and parts[2] in ("avg_at_k", "pass_at_k"):
        return parts[1]
    return None


def ledger_names() -> tuple[str, ...]:
    return (
        *(cost_device_seconds(p) for p in (*PHASES, "idle", MEASURE)),
        COST_DEVICE_SECONDS,
        COST_DEVICE_DAYS,
        COST_WALL_SECONDS,
        COST_TOOL_CPU_SECONDS,
        COST_OVERLAP_SECONDS,
        COST_ENGINE_IDLE_SHARE,
        COST_TRAINER_IDLE_SHARE,
        *(tokens_total(k) for k in TOKEN_KINDS),
        *(modeled_seconds(p) for p in MODELED_PHASES),
        MODELED_WALL_SECONDS,
        MODELED_GPU_DAYS,
    )


def all_names() -> tuple[str, ...]:
    """Every fixed name, and the per-set patterns (eval/<set>/...)."""
    return STEP + ledger_names() + EVAL_SET_PATTERNS + (THRESHOLD_GRID_PATTERN,) + TRL_NAMES


def unknown(names: Iterable[str]) -> list[str]:
    """Names not declared here (a test guard: every logged name is documented)."""
    known = set(all_names())
    return sorted(
        n
        for n in names
        if n not in known
        and eval_set_of(n) is None
        and not n.startswith((TRL_PREFIX, THRESHOLD_GRID_PREFIX))
    )
