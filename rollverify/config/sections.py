"""The sections of a run's config, one dataclass each: every field with its default, what it
means and the rule its value follows."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from rollverify.config.field import at_least_one, config_field, positive
from rollverify.config.math_prompts import ANSWER_FIELDS, PROMPT_FIELDS, valid_template
from rollverify.config.reward_spec import is_reward_spec
from rollverify.core.methods import METHODS


def _named(field: str | None) -> bool:
    return field is None or bool(field.strip())


_SET_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # it names metrics: eval/<set>/avg_at_k


@dataclass
class ModelConfig:
    path: str = config_field(
        "models/tiny-qwen3-chain",
        "Folder with a transformers causal LM + tokenizer, or a hub id. Relative: to the "
        "config's folder, else the working directory, else the package's data (the default, "
        "the shipped ~0.6M-parameter Qwen3).",
    )
    dtype: Literal["float32", "bfloat16"] = config_field(
        "float32",
        "Compute dtype: the trainer's forward and backward, and the engines' weights; "
        "bfloat16 on GPUs. The trainer's own weights and AdamW state: train.precision.",
    )


@dataclass
class TaskConfig:
    name: Literal["chain", "math"] = config_field(
        "chain", "chain: the synthetic long-tail task; math: real math (data/math) on GPUs."
    )
    max_steps: int = config_field(
        32, "chain: longest chain; P(n) ~ n^-alpha over 1..max_steps.", at_least_one, ">= 1"
    )
    alpha: float = config_field(
        1.3, "chain: tail exponent; smaller = heavier tail.", positive, "> 0"
    )
    train_file: str = config_field(
        "data/math/math_train.json", "math: training problems (a path as for model.path)."
    )
    eval_file: str = config_field(
        "data/math/math500.json", "math: held-out problems (a path as for model.path)."
    )
    prompt_field: str | None = config_field(
        None,
        "math: the field of each record that holds its prompt, dotted into nested records "
        "(extra_info.question): text (put into prompt_template) or chat messages [{role, "
        f"content}} ...] (used as they are). null: the first a record has of "
        f"{', '.join(PROMPT_FIELDS)}. Read in the train file and every eval file that has it.",
        _named,
        "a field name (dots for nested records), or null",
    )
    answer_field: str | None = config_field(
        None,
        "math: the field of each record that holds its reference answer, dotted into nested "
        "records (reward_model.ground_truth): a string, a number, or a list of them (any "
        "listed answer counts as correct); surrounding whitespace and $ are dropped. null: the "
        f"first a record has of {', '.join(ANSWER_FIELDS)} (of a worked solution, its "
        "'#### x' or last \\boxed{x}). `rvctl data check FILE` shows what is read and skipped.",
        _named,
        "a field name (dots for nested records), or null",
    )
    prompt_template: str = config_field(
        "boxed",
        "math: how a plain-text problem is asked. boxed: the problem, then 'Please reason step "
        "by step, and put your final answer within \\boxed{}.'; dapo: DAPO-Math's, whose "
        "response ends with a line 'Answer: x' (the reward reads either); or a text of your "
        "own holding {problem}. Chat-message prompts are used as they are.",
        valid_template,
        "boxed, dapo, or a text holding {problem}",
    )
    eval_files: dict[str, str] = config_field(
        {},
        "math: several held-out sets, name -> file ({aime24: data/math/aime24.json, ...}); "
        "each logged as eval/<name>/avg_at_k and pass_at_k, eval_accuracy their mean. Empty: "
        "eval_file alone, named after its file.",
        lambda sets: all(_SET_NAME.fullmatch(name) for name in sets),
        "a mapping of set names (letters, digits, _ . -) to files",
    )
    eval_sets: dict[str, int] = config_field(
        {},
        "chain: several held-out sets, name -> longest chain (difficulty) of its problems "
        "({short: 8, long: 32}). Empty: one set, 'chain', drawn as training is (max_steps).",
        lambda sets: all(_SET_NAME.fullmatch(n) and steps >= 1 for n, steps in sets.items()),
        "a mapping of set names (letters, digits, _ . -) to chain lengths >= 1",
    )
    max_prompt_tokens: int | None = config_field(
        None,
        "math: prompts longer than this many tokens (after the chat template) are skipped, in "
        "training and evaluation, with a warning (training: at the first; eval: the count), "
        "as verl's filter_overlong_prompts. null: vllm.max_model_len - rollout.max_new_tokens, "
        "what fits the engine.",
        lambda x: x is None or x >= 1,
        ">= 1 or null",
    )
    eval_size: int = config_field(
        256, "Held-out problems in each evaluation (per set).", at_least_one, ">= 1"
    )
    eval_samples: int = config_field(
        1,
        "k: samples per eval problem; avg@k = mean reward, pass@k = share of problems with a "
        "sample scored 1.",
        at_least_one,
        ">= 1",
    )
    eval_seed: int = config_field(
        12345,
        "Seed of the held-out set and of eval sampling (fixed, so "
        "every run is scored on the same problems).",
    )
    reward: str | None = config_field(
        None,
        "Your own reward instead of the task's, in training and evaluation: 'module:function' "
        "(from the config file's folder, the working directory, else the installed packages) or "
        "'path/to/file.py:function'; f(response, answer) -> float, or TRL's "
        "f(completions, **kwargs) -> list[float] (rollverify/tasks/custom_reward.py says which "
        "is which). null: the task's own (chain: exact match; math: math-verify).",
        is_reward_spec,
        "'module:function' or 'path/to/file.py:function', or null",
    )


@dataclass
class RolloutConfig:
    engine: Literal["auto", "hf", "vllm"] = config_field(
        "auto",
        "vllm: the vLLM sidecar (Ray actors, section vllm); hf: the in-process transformers "
        "engine; auto: vllm wherever vLLM imports, else hf.",
    )
    slots: int = config_field(
        64, "Trajectories generated at once (engine batch).", at_least_one, ">= 1"
    )
    batch_groups: int = config_field(
        8, "B: complete groups (prompts) trained per step.", at_least_one, ">= 1"
    )
    group_size: int = config_field(
        8, "G: samples per prompt (GRPO group).", lambda x: x >= 2, ">= 2"
    )
    max_new_tokens: int = config_field(
        288, "Token budget per response (chain: the longest is 281).", at_least_one, ">= 1"
    )
    temperature: float = config_field(
        1.0, "Sampling temperature (the loss uses the same).", positive, "> 0"
    )
    top_p: float = config_field(
        1.0,
        "Nucleus sampling: engines sample from the smallest set of tokens holding this much "
        "probability. Sampling only: behavior log-probs, OPS and the loss use the untruncated "
        "softmax (rollverify/core/sampling.py). With engine vllm, needs temperature 1. 1: off.",
        lambda x: 0 < x <= 1,
        "in (0, 1]",
    )
    top_k: int = config_field(
        0,
        "Engines sample from the k most likely tokens only (as top_p: sampling only; with "
        "engine vllm, needs temperature 1). 0: off.",
        lambda x: x >= 0,
        ">= 0",
    )
    overlong_buffer: int = config_field(
        0,
        "DAPO's soft overlong punishment (TRL's get_soft_overlong_punishment), in training "
        "only: a response longer than max_new_tokens - overlong_buffer loses reward linearly, "
        "up to 1 at max_new_tokens. 0: off. DAPO: 4096 of 20480.",
        lambda x: x >= 0,
        ">= 0",
    )
    dynamic_sampling_max_drops: int = config_field(
        0,
        "DAPO's dynamic sampling: a group whose rewards all tie (zero advantage, no gradient) "
        "is dropped when it completes and a new prompt takes its place, up to this many per "
        "step; then groups train as they come. 0: off. DAPO's recipe: up to 10 batches, "
        "9 x batch_groups (rollverify/rollout/dynamic_sampling.py).",
        lambda x: x >= 0,
        ">= 0",
    )
    max_inflight_groups: int | None = config_field(
        None,
        "Partial methods: most groups in play at once (None: as many as keep the slots "
        "full). Equal to batch_groups, partial rollout never pauses and equals grpo.",
        lambda x: x is None or x >= 1,
        ">= 1 or null",
    )
    max_staleness: int | None = config_field(
        None,
        "Partial methods: the staleness cap of prime-rl (max_off_policy_steps). When the cache "
        "resumes, a group with a cached trajectory whose oldest token is more than this many "
        "policy versions old is dropped, all G samples (tokens_discarded, "
        "trajectories_dropped_stale), and its prompt starts again with new samples. A response "
        "gets max_staleness + 1 rollouts to finish (train.updates_per_rollout u > 1: "
        "max_staleness // u + 1) and its group trains only if all G samples of one start "
        "finish in time: a prompt whose responses need longer is starved, restarted again and "
        "again and never trained (rollverify/rollout/staleness_cap.py). null: off.",
        lambda x: x is None or x >= 0,
        ">= 0 or null",
    )


@dataclass
class VerifyConfig:
    ops_metric: Literal["abs_ratio", "abs_log_ratio", "k3"] = config_field(
        "abs_ratio", "Token OPS: |r-1|, |log r| or k3 (spec)."
    )
    ds: float = config_field(
        0.01,
        "Sequence-stage threshold on a segment's mean OPS; inf disables. The paper's 0.01; "
        "the acceptance it gives on the embedded default: docs/results.md.",
        positive,
        "> 0 (inf allowed)",
        allow_inf=True,
    )
    dt: float = config_field(
        2.0,
        "Token-stage threshold on one token's OPS; inf disables.",
        positive,
        "> 0 (inf allowed)",
        allow_inf=True,
    )
    window: int = config_field(8, "Acceptance-rate window (cycles).", at_least_one, ">= 1")
    switch_threshold: float = config_field(
        0.5, "Switch to on-policy when the window mean is below.", lambda x: 0 < x <= 1, "in (0, 1]"
    )
    staleness_bound: int = config_field(
        2,
        "staleness-filter: drop samples staler than this many versions.",
        lambda x: x >= 0,
        ">= 0",
    )
    ops_bound: float = config_field(
        0.05, "ops-filter: drop samples whose sequence OPS exceeds this.", positive, "> 0"
    )


@dataclass
class CorrectionConfig:
    """The peers' off-policy corrections (rollverify/core/corrections.py), each a method of its own
    on partial rollout; defaults are the ones their code ships."""

    tis_cap: float = config_field(
        2.0,
        "tis: token weight min(pi_old/mu, C), C this (verl's and slime's 2; TRL's own default "
        "is 3).",
        lambda x: x >= 1,
        ">= 1",
    )
    mis_low: float = config_field(
        0.5,
        "mis: a sequence whose ratio prod_t pi_old/mu is below this is masked.",
        lambda x: 0 < x <= 1,
        "in (0, 1]",
    )
    mis_high: float = config_field(2.0, "mis: ... or above this.", lambda x: x >= 1, ">= 1")
    icepop_low: float = config_field(
        0.5,
        "icepop: a token whose pi_old/mu is below this is masked (IcePop's [0.5, 5]).",
        lambda x: 0 < x <= 1,
        "in (0, 1]",
    )
    icepop_high: float = config_field(5.0, "icepop: ... or above this.", lambda x: x >= 1, ">= 1")
    opsm_delta: float = config_field(
        0.03,
        "opsm: a sequence of negative advantage is masked when its mean over tokens of "
        "log mu - log pi_theta exceeds this (DeepSeek-V3.2's delta, TRL's "
        "off_policy_mask_threshold). The paper gives no value; 0.03 is AgileRL's default for "
        "the same mask (TRL's docs suggest 0.5, which a tiny model's drift never reaches).",
        positive,
        "> 0",
    )
    decoupled_cap: float = config_field(
        5.0,
        "decoupled and m2po: AReaL's behavior weight pi_prox/mu; tokens above this are masked "
        "(AReaL's rejection_sampling upper 5, action mask).",
        lambda x: x >= 1,
        ">= 1",
    )
    m2po_tau: float = config_field(
        0.04,
        "m2po: the tokens of largest (log mu - log pi_prox)^2 are masked until the mean of the "
        "rest is below this (AReaL's m2_threshold).",
        positive,
        "> 0",
    )


@dataclass
class TrainConfig:
    method: str = config_field(
        "rollverify",
        f"One of: {', '.join(METHODS)}.",
        lambda x: x in METHODS,
        f"one of {', '.join(METHODS)}",
    )
    steps: int = config_field(60, "Optimizer steps.", at_least_one, ">= 1")
    seed: int = config_field(
        0, "Seeds data order, sampling and initial RNG.", lambda x: 0 <= x < 2**32, "in [0, 2**32)"
    )
    learning_rate: float = config_field(
        5e-4,
        "AdamW learning rate (constant after warmup). Tiny default 5e-4: grpo climbs steadily "
        "there (docs/results.md).",
        positive,
        "> 0",
    )
    warmup_steps: int = config_field(0, "Linear warmup steps.", lambda x: x >= 0, ">= 0")
    ratio_denominator: Literal["behavior", "recomputed"] | None = config_field(
        None,
        "The ratio's denominator pi_old. behavior: each token's log-prob mu from the engine "
        "that sampled it (a stale token looks stale to the clip). recomputed: the batch scored "
        "by the weights before the step's first update (TRL's old_per_token_logps; a stale "
        "token looks on-policy), as verl's and slime's partial rollout. null: the method's own "
        "(`rvctl methods`: behavior for the paper's methods, recomputed for "
        "partial-recomputed and the peers' corrections).",
    )
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = config_field(
        "dapo", "TRL loss aggregation for methods that keep the clipped surrogate."
    )
    epsilon: float = config_field(0.2, "Clip range of the ratio pi/mu (low side).", positive, "> 0")
    epsilon_high: float = config_field(
        0.28, "Clip range, high side (DAPO clip-higher).", positive, "> 0"
    )
    beta: float = config_field(
        0.0, "KL coefficient to the base model (0: no reference model).", lambda x: x >= 0, ">= 0"
    )
    max_grad_norm: float = config_field(1.0, "Gradient clipping.", positive, "> 0")
    mask_truncated: bool = config_field(
        False,
        "DAPO's overlong filtering (TRL's mask_truncated_completions): responses cut at "
        "rollout.max_new_tokens get no tokens in the loss.",
    )
    weight_decay: float = config_field(
        0.0, "AdamW weight decay (decoupled; DAPO and verl use 0.1).", lambda x: x >= 0, ">= 0"
    )
    gradient_checkpointing: bool = config_field(
        False,
        "Recompute each decoder layer's activations in the backward pass instead of keeping "
        "them (transformers' gradient checkpointing): ~1/3 more compute, activations of one "
        "layer instead of all. On for long responses at scale; off for the tiny default.",
    )
    updates_per_rollout: int = config_field(
        1,
        "Optimizer steps one rollout batch is split into (DAPO/verl's mini-batches: TRL's "
        "steps_per_generation); each step trains B x G / updates_per_rollout sequences, the "
        "policy version advancing per step. Checkpoints and stops land between rollouts.",
        at_least_one,
        ">= 1",
    )
    micro_batch_size: int | None = config_field(
        None,
        "Sequences per forward/backward pass; a step's sequences (B x G / updates_per_rollout) "
        "are accumulated over passes of this many (TRL's gradient_accumulation_steps): the "
        "same update. null: the step's sequences in one pass. Must divide them.",
        lambda x: x is None or x >= 1,
        ">= 1 or null",
    )
    precision: Literal["mixed", "pure"] = config_field(
        "mixed",
        "With model.dtype bfloat16. mixed: float32 master weights and AdamW state, forward and "
        "backward in bfloat16 (autocast), bfloat16 weights to the engines: what TRL, verl and "
        "OpenRLHF do. pure: weights and AdamW state in bfloat16 too (less memory, but an update "
        "smaller than half a weight's rounding step is lost: at lr 1e-6 most weights never "
        "move). With model.dtype float32 both are float32.",
    )
    threads: int = config_field(
        0, "torch threads (0: leave torch's default).", lambda x: x >= 0, ">= 0"
    )
    processes: int = config_field(
        1,
        "Trainer processes (torch.distributed world size), one device each: a GPU, or on CPU a "
        "process; each trains its share of every batch (gradients averaged: N processes x B/N "
        "equal 1 x B). rvctl starts them through torchrun on this machine; across machines, "
        "run torchrun yourself (docs/distributed.md). The ledger counts them + the engines'.",
        at_least_one,
        ">= 1",
    )
    sharding: Literal["none", "fsdp"] = config_field(
        "none",
        "none: every process holds the whole model and AdamW state (DDP). fsdp: each holds "
        "1/train.processes of them (FSDP2 through transformers and accelerate; GPUs only: "
        "accelerate does not shard on a CPU). Gathered one tensor at a time for weight sync "
        "and checkpoints (rank 0 writes them whole).",
    )
    stop_grace_seconds: float | None = config_field(
        None,
        "After SIGTERM/SIGINT: the time a scheduler gives before SIGKILL (Slurm's --signal "
        "lead, Kubernetes' terminationGracePeriodSeconds), less a margin. The run stops at "
        "the next safe point, skips that checkpoint if the last one took longer than what is "
        "left, and stops at once when it runs out; the last good checkpoint resumes. null: "
        "finish the step and its checkpoint however long they take.",
        lambda x: x is None or x > 0,
        "> 0 or null",
    )
    checkpoint_every: int = config_field(
        10,
        "Write a checkpoint every this many steps (also at the end and on SIGINT/SIGTERM); "
        "0: only then. `rvctl resume RUN_DIR` continues from the last good one.",
        lambda x: x >= 0,
        ">= 0",
    )
    async_checkpoint: bool = config_field(
        False,
        "Write periodic checkpoints in a background thread from a copy of the run's state "
        "(host memory for the weights and AdamW state once more) while training goes on; the "
        "next checkpoint, a stop and the end wait for it. The last one, and a stop's, are "
        "written before the run ends.",
    )
    keep_checkpoints: int = config_field(
        3, "Checkpoints kept per run (the newest).", at_least_one, ">= 1"
    )
    eval_every: int = config_field(
        20,
        "Evaluate every this many steps (and at the end); 0: only at the start and the end.",
        lambda x: x >= 0,
        ">= 0",
    )


@dataclass
class VLLMConfig:
    engines: int = config_field(
        1,
        "Sidecar engines, one Ray actor each; rollout.slots are split evenly between them.",
        at_least_one,
        ">= 1",
    )
    tensor_parallel_size: int = config_field(
        1, "GPUs per engine (tensor parallel).", at_least_one, ">= 1"
    )
    gpu_memory_utilization: float = config_field(
        0.85, "Share of each GPU vLLM may use (GPU only).", lambda x: 0 < x <= 1, "in (0, 1]"
    )
    max_model_len: int = config_field(
        512, "Longest prompt + response (>= prompt + max_new_tokens).", at_least_one, ">= 1"
    )
    enforce_eager: bool = config_field(
        True, "No CUDA graphs / compilation (required on CPU; set false on GPUs for speed)."
    )
    cpu_kv_cache_gib: int = config_field(
        1,
        "CPU only: KV cache per engine, whole GiB (a fixed size: vLLM's automatic one made the "
        "engine's warm-up slow on CPU).",
        at_least_one,
        ">= 1",
    )
    sync_check_tolerance: float = config_field(
        1e-3,
        "After each weight sync the engine's log-probs of a probe sequence must match "
        "the trainer's within this (fp32: 1e-3; bf16 needs more: 0.1 in the GPU config).",
        positive,
        "> 0",
    )
    placement: Literal["pack", "spread"] = config_field(
        "pack",
        "How Ray places the engines (one placement group, a bundle of tensor_parallel_size "
        "GPUs per engine, each bundle on one node): pack on as few nodes as it can, spread "
        "one per node where it can (docs/distributed.md).",
    )
    ray_address: str | None = config_field(
        None, "Ray cluster to join (None: a private local Ray on 127.0.0.1)."
    )
    weight_sync: Literal["collective", "object_store"] = config_field(
        "collective",
        "How weights reach the engines after each update: collective (each tensor broadcast "
        "from trainer rank 0 to every engine worker: NCCL on GPUs, gloo on CPU; no copy; the "
        "engines' nodes must reach rank 0's address), object_store (through Ray's object "
        "store, one copy kept for a replaced engine; 11x slower at 133M parameters on CPU, "
        "benchmarks/results/weight_sync.json).",
    )


@dataclass
class TrackingConfig:
    uri: str | None = config_field(
        None, "MLflow tracking URI; None: sqlite file in the output folder."
    )
    experiment: str = config_field("rollverify", "MLflow experiment name.")
    plots: bool = config_field(
        True,
        "At the end of a run, its curves (reward, entropy, OPS, acceptance rate, length, "
        "accuracy) as PNGs in RUN/plots and the MLflow run's artifacts (beside config.yaml, "
        "ledger.json and summary.json, always stored).",
    )


@dataclass
class CostConfig:
    gpu: Literal["a100", "h100", "h200", "b200"] = config_field(
        "h100",
        "The GPU whose spec sheet prices each step's work (rollverify/cost/costmodel/): the "
        "modeled_* metrics and modeled_gpu_days, beside the measured device-seconds.",
    )
    layout: Literal["auto", "colocated", "disaggregated"] = config_field(
        "auto",
        "colocated: the same GPUs roll out, then train (max of train.processes and the engines' "
        "GPUs); disaggregated: the engines' GPUs (vllm.engines x tensor_parallel_size) beside "
        "the trainer's; auto: colocated for the in-process engine, disaggregated for vLLM.",
    )
