"""What a run runs beside the trainer: the vLLM sidecar, the MLflow tracking, the cost model."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from rollverify.config.field import at_least_one, config_field, positive

RAY_RESOURCES = {"CPU", "GPU", "memory", "object_store_memory"}  # Ray's own, not a node's mark


def _custom_resource(name: object) -> bool:
    return (
        isinstance(name, str)
        and bool(re.fullmatch(r"[A-Za-z0-9_.-]+", name))
        and (name not in RAY_RESOURCES)
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
    block_size: int | None = config_field(
        None,
        "Tokens per KV-cache block (null: vLLM's default, 16 on GPUs). The cost model's "
        "simulated engine counts blocks of this size (rollverify/cost/kv_cache.py).",
        lambda x: x is None or x >= 1,
        ">= 1 or null",
    )
    max_num_batched_tokens: int | None = config_field(
        None,
        "Tokens one engine iteration may process (null: vLLM's default for an engine, 2048). "
        "Its profiling pass at this size is memory the KV cache does not get.",
        lambda x: x is None or x >= 1,
        ">= 1 or null",
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
    node_resource: str | None = config_field(
        None,
        "A custom Ray resource that marks the engines' nodes (`ray start --resources="
        "'{\"engine_node\": 1}'`): each engine's bundle asks 0.001 of it, so the engines run on "
        "those nodes only and the trainer stays where it is (docs/clusters.md). Needs "
        "vllm.ray_address. null: any node with room.",
        lambda x: x is None or _custom_resource(x),
        "a custom resource's name (letters, digits, _ - .; not CPU, GPU, memory) or null",
    )
    node_lost_wait_seconds: float = config_field(
        60.0,
        "An engine whose node is lost (its raylet gone: a preempted or dead host) waits this "
        "long for Ray to place it again on a node that has vllm.node_resource (another, or "
        "the lost one back); then vllm.node_lost says what happens.",
        lambda x: x >= 0,
        ">= 0",
    )
    node_lost: Literal["anywhere", "stop"] = config_field(
        "anywhere",
        "After vllm.node_lost_wait_seconds with no such node: anywhere, the engine starts on "
        "any node with room (the head's too) and the run goes on; stop, the run stops with "
        "one line, and rvctl resume continues it from its last checkpoint "
        "(train.checkpoint_every) once the nodes are back.",
    )
    weight_sync: Literal["collective", "object_store"] = config_field(
        "collective",
        "How weights reach the engines after each update: collective (each tensor broadcast "
        "from trainer rank 0 to every engine worker: NCCL on GPUs, gloo on CPU; no copy; the "
        "engines' nodes must reach rank 0's address), object_store (through Ray's object "
        "store, one copy kept for a replaced engine; 11x slower at 133M parameters on CPU, "
        "benchmarks/results/weight_sync.json).",
    )
    allow_untested: bool = config_field(
        False,
        "Run on a vLLM release this project did not check (rollverify/infra/"
        "vllm_versions.py: CHECKED; benchmarks/vllm_compat.py checks one). Off: such a vLLM "
        "stops the run at its start, in one line; on: it runs, with a warning.",
    )
    engine_args: dict[str, Any] = config_field(
        {},
        "Any other vLLM engine argument (AsyncEngineArgs), given to every sidecar: "
        "{enable_prefix_caching: false, kv_cache_dtype: fp8}. Checked at load: unknown names "
        "are refused with the nearest one, and names rvctl sets (max_model_len, ...) with its "
        "field to use. On CPU the sidecar turns chunked prefill off whatever this says.",
    )


# transformers' integrations a run may also log to (MLflow is not one: rvctl owns the store)
REPORT_TO = {"tensorboard", "wandb", "trackio", "comet_ml", "clearml", "neptune", "swanlab"}
REPORT_TO |= {"dvclive", "azure_ml", "codecarbon"}


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
    cache_ops: bool = config_field(
        True,
        "Methods that do not verify: score the cache under each new policy to log its OPS "
        "(ops_cache_before / after). A forward pass over every cached trajectory each step, "
        "for the logs only (the ledger's measure phase): on a CPU up to 40% of a partial "
        "rollout step with many slots. false: not scored, not logged. Verifying methods "
        "score the cache whatever this says.",
    )
    system_metrics: bool = config_field(
        False,
        "MLflow's system metrics on each run (system/*: CPU, memory, disk, network, and GPU "
        "utilization and memory where pynvml sees GPUs), sampled every "
        "system_metrics_seconds.",
    )
    system_metrics_seconds: float = config_field(
        10.0, "Sampling interval of tracking.system_metrics.", positive, "> 0"
    )
    report_to: list[str] = config_field(
        [],
        "Also send TRL's step logs (loss, grad norm, clip ratios, rewards, ...) to these, as "
        "TRL's report_to does: tensorboard writes event files under RUN/trl/runs/ "
        "(`tensorboard --logdir RUN/trl/runs`). rvctl's own metrics (OPS, acceptance, cost) "
        "and everything rvctl reads stay in MLflow, whatever this says.",
        lambda names: all(name in REPORT_TO for name in names),
        f"each one of {', '.join(sorted(REPORT_TO))} (MLflow is rvctl's own store)",
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
    profile: str | None = config_field(
        None,
        "A profile written by `rvctl calibrate RUN` (a JSON file): `rvctl simulate` prices "
        "with its fitted terms (this machine's) instead of the GPU's spec sheet; its --profile "
        "option wins. null: the spec sheet.",
    )
