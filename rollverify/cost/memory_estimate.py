"""What a run will hold in memory on each GPU, and on disk per checkpoint, from what it runs
(MemorySettings, which training/cost_settings.py takes from its config) and the model's shape
alone: what `rvctl train --dry-run` prints before anything starts.

An estimate, not a measurement (no GPU is touched):
- trainer states: weights, gradients and the two AdamW moments, each in the master dtype
  (train.precision), divided over train.processes with fsdp sharding;
- activations of one micro-batch (train.micro_batch_size sequences of vllm.max_model_len
  tokens): Korthikanti et al. 2022's 34 bytes x tokens x hidden per layer in bf16 (no
  attention-score term: SDPA/flash attention); with gradient checkpointing, each layer's input
  (2 bytes x tokens x hidden) plus one layer's full set;
- logits: bf16 logits of the micro-batch and their gradient (4 bytes x tokens x vocab);
- a reference model (train.beta > 0): weights in model.dtype, sharded like the rest;
- the in-process (hf) engine: its copy of the weights in model.dtype, on the trainer's device;
- engines: vLLM takes vllm.gpu_memory_utilization of each GPU; its weights (model.dtype, split
  over tensor_parallel_size), its profiling pass's peak and the KV cache share it
  (rollverify/cost/kv_cache.py);
- a checkpoint: the weights and both AdamW moments in the master dtype (every rank's RNG and
  the loop's state are kilobytes)."""

from __future__ import annotations

from dataclasses import dataclass

from rollverify.config.model_shape import ModelShape
from rollverify.cost import kv_cache
from rollverify.cost.costmodel.gpus import GPUS, GPUProfile

BF16 = 2
ACTIVATION_BYTES_PER_LAYER = 34  # x tokens x hidden, bf16, no recomputation


@dataclass(frozen=True)
class MemoryEstimate:
    gpu: GPUProfile
    trainer_parts: dict[str, float]  # bytes per trainer GPU: states, activations, logits, ...
    engine_weights: float  # bytes per engine GPU
    kv_tokens: int  # tokens the KV cache of one engine holds
    kv_tokens_wanted: int  # its slots x vllm.max_model_len
    checkpoint_bytes: float

    @property
    def trainer_bytes(self) -> float:
        return sum(self.trainer_parts.values())

    def problems(self) -> list[str]:
        """What will not fit, one line each naming the field to change."""
        found = []
        capacity = self.gpu.memory
        if self.trainer_bytes > capacity:
            found.append(
                f"train: ~{gib(self.trainer_bytes):.0f} GiB per trainer GPU, {self.gpu.name} "
                f"has {gib(capacity):.0f}; shard (train.sharding: fsdp) over more "
                "train.processes, lower train.micro_batch_size, or turn on "
                "train.gradient_checkpointing"
            )
        if self.kv_tokens <= 0:
            found.append(
                f"vllm: the weights (~{gib(self.engine_weights):.0f} GiB per GPU) leave no KV "
                "cache; raise vllm.tensor_parallel_size or vllm.gpu_memory_utilization"
            )
        return found


def gib(n: float) -> float:
    return n / 2**30


def size(n: float) -> str:
    """Bytes for people: 1.5 GiB, 230.0 MiB."""
    return f"{gib(n):.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


@dataclass(frozen=True)
class MemorySettings:
    """What the estimate prices (a run's: rollverify/training/cost_settings.py)."""

    gpu: str  # cost.gpu: the GPU every trainer and engine GPU is
    master_dtype: str  # the trainer's weights and AdamW state ("float32" or "bfloat16")
    compute_dtype: str  # model.dtype: the engines' weights, a reference model
    processes: int  # train.processes
    fsdp: bool  # train.sharding: fsdp (weights, gradients and moments over the processes)
    micro_batch: int  # sequences of one pass of the trainer
    max_model_len: int  # vllm.max_model_len: each sequence's tokens
    gradient_checkpointing: bool
    reference_model: bool  # train.beta > 0
    in_process_engine: bool  # the hf engine: its own copy of the weights on the trainer's GPU
    slots: int  # rollout.slots, over all engines
    engines: int  # vllm.engines
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_num_batched_tokens: int | None
    block_size: int | None


def _bytes(dtype: str) -> int:
    return 4 if dtype == "float32" else BF16


def estimate(settings: MemorySettings, shape: ModelShape) -> MemoryEstimate:
    """The memory estimate of a run of `settings` and a model of `shape` (see the module
    docstring)."""
    gpu = GPUS[settings.gpu]
    master = _bytes(settings.master_dtype)
    shards = settings.processes if settings.fsdp else 1
    tokens = settings.micro_batch * settings.max_model_len
    layer = ACTIVATION_BYTES_PER_LAYER * tokens * shape.hidden
    if settings.gradient_checkpointing:
        activations = BF16 * tokens * shape.hidden * shape.layers + layer
    else:
        activations = layer * shape.layers
    parts = {
        "weights": shape.parameters * master / shards,
        "gradients": shape.parameters * master / shards,
        "adamw_moments": 2 * shape.parameters * master / shards,
        "activations": activations,
        "logits": 2 * BF16 * tokens * shape.vocab,
    }
    compute = _bytes(settings.compute_dtype)
    if settings.reference_model:
        parts["reference_model"] = shape.parameters * compute / shards
    if settings.in_process_engine:  # the in-process engine's own copy, on the trainer's device
        parts["engine_copy"] = shape.parameters * compute
    engine_weights = shape.parameters * compute / settings.tensor_parallel_size
    kv = kv_cache.capacity(
        shape,
        gpu.memory,
        settings.gpu_memory_utilization,
        settings.tensor_parallel_size,
        max_num_seqs=settings.slots // settings.engines,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        block_size=settings.block_size,
        dtype_bytes=compute,
    )
    return MemoryEstimate(
        gpu=gpu,
        trainer_parts=parts,
        engine_weights=engine_weights,
        kv_tokens=kv.tokens,
        kv_tokens_wanted=settings.slots // settings.engines * settings.max_model_len,
        checkpoint_bytes=3 * shape.parameters * master,
    )
