"""Training: the method, the optimizer, the loss, the processes, checkpoints and evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rollverify.config.field import at_least_one, config_field, positive
from rollverify.core.methods import METHODS


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
    trl_args: dict[str, Any] = config_field(
        {},
        "Any other argument of TRL's GRPOConfig, passed as given: {lr_scheduler_type: cosine, "
        "optim: adamw_torch_fused}. Checked at load: unknown names are refused with the "
        "nearest one, and names rvctl sets (learning_rate, ...) with its field to use.",
    )
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
    evaluate: bool = config_field(
        True,
        "false: no evaluation at all, not the base model's nor the last (a smoke run; "
        "`rvctl train --no-eval`): the run has no accuracy to report.",
    )
