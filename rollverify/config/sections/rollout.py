"""The rollout: the engine, its batch, how it samples and how partial rollout holds
groups over."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rollverify.config.field import at_least_one, config_field, positive


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
    mode: Literal["sync", "async"] = config_field(
        "sync",
        "sync: the engine generates, then waits while the trainer trains (grpo, partial "
        "rollout). async: it never waits; the trainer takes B complete groups as soon as they "
        "exist and each update reaches the engine in flight, between two tokens "
        "(rollverify/rollout/async_rollout.py). The method's verification and ratio apply "
        "per trajectory before it trains; `partial` means nothing here. One process, "
        "updates_per_rollout 1.",
    )
    eta: int = config_field(
        1,
        "async: the staleness bound (AReaL's max_head_offpolicyness). No group starts that "
        "could train more than eta versions after the policy that started it "
        "(rollverify/core/staleness_bound.py). 0: each batch starts and ends under one "
        "policy, as grpo.",
        lambda x: x >= 0,
        ">= 0",
    )
    batch_order: Literal["complete", "start"] = config_field(
        "complete",
        "async: which groups a batch takes. complete: the B complete groups that started "
        "earliest, as they finish (short groups tend to train first, as in partial "
        "rollout). start: the B groups that started earliest, waiting until they are complete "
        "(AReaL's FIFO): batches hold groups as drawn, so only staleness differs from grpo's "
        "(the composition control of docs/results.md).",
    )
    lockstep: bool = config_field(
        True,
        "async: the engine's steps and the trainer's take turns in one thread, so a run is "
        "reproducible and resumes bit for bit (vLLM's sidecar generates between them too, "
        "but starts nothing new). false: the engine is driven from a thread of its own "
        "beside the trainer (rollverify/rollout/engine_thread.py), keeping its slots full, "
        "and every update lands whenever it is sent: overlap, not reproducible step for "
        "step.",
    )
    keep_kv: bool = config_field(
        False,
        "async: a sequence running when an update lands continues on the KV cache the old "
        "weights computed (PipelineRL's choice) instead of recomputing it under the new ones. "
        "A checkpoint recomputes it either way. The hf engine only.",
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
