"""What the cost parts price, from a run's config: the whole RunConfig is read here and above,
never in rollverify/cost/, which takes its own settings as the engines and tasks do.

    pricing_layout   the GPUs the cost model prices a run's work on (Layout)
    run_pricing      ... with the model's shape and a GPU: the prices of its steps (Pricing)
    device_layout    the devices the run holds, which its ledger books (DeviceLayout)
    memory_estimate  what it holds in memory on each GPU and on disk (MemorySettings)

Light (no torch): `rvctl simulate` checks its input with these before anything heavy loads.
"""

from __future__ import annotations

from rollverify.config import RunConfig
from rollverify.config.model_shape import ModelShape
from rollverify.cost.costmodel import GPUS, Layout, Pricing
from rollverify.cost.ledger import DeviceLayout
from rollverify.cost.memory_estimate import MemoryEstimate, MemorySettings, estimate


def pricing_layout(config: RunConfig) -> Layout:
    """cost.layout, where "auto" is disaggregated for the vllm engine and colocated for the
    in-process one; the vLLM engines (tensor parallel each), or the in-process engine: one,
    on one GPU."""
    kind = config.cost.layout
    if kind == "auto":
        kind = "disaggregated" if config.engine() == "vllm" else "colocated"
    if config.engine() == "vllm":
        vllm = config.vllm
        return Layout(kind, config.train.processes, vllm.engines, vllm.tensor_parallel_size)
    return Layout(kind, config.train.processes)


def model_shape(config: RunConfig) -> ModelShape:
    return ModelShape.of(config.model_path(), revision=config.model.revision)


def run_pricing(config: RunConfig, gpu: str | None = None) -> Pricing:
    """The prices of a run's work on `gpu` (default: cost.gpu)."""
    return Pricing(model_shape(config), GPUS[gpu or config.cost.gpu], pricing_layout(config))


def device_layout(config: RunConfig) -> DeviceLayout:
    """The devices a run holds: its trainer processes, and the vLLM engines' GPUs (tensor
    parallel each); the in-process engine holds none of its own, but in a thread of its own
    (asynchronous, not in lock-step) it counts as one."""
    engines = config.vllm.engines * config.vllm.tensor_parallel_size
    if config.engine() == "hf":  # in the trainer, or beside it in a thread of its own
        rollout = config.rollout
        engines = int(rollout.mode == "async" and not rollout.lockstep)
    return DeviceLayout(config.train.processes, engines)


def memory_settings(config: RunConfig) -> MemorySettings:
    """What the memory estimate prices: a pass of the trainer is train.micro_batch_size
    sequences, or (unset) each process's share of a step's batch, as TRL is set up
    (trl_adapter.grpo_arguments)."""
    train, rollout, vllm = config.train, config.rollout, config.vllm
    per_step = rollout.batch_groups * rollout.group_size // train.processes
    per_step //= train.updates_per_rollout
    return MemorySettings(
        gpu=config.cost.gpu,
        master_dtype=config.master_dtype(),
        compute_dtype=config.model.dtype,
        processes=train.processes,
        fsdp=train.sharding == "fsdp",
        micro_batch=train.micro_batch_size or max(per_step, 1),
        max_model_len=vllm.max_model_len,
        gradient_checkpointing=train.gradient_checkpointing,
        reference_model=train.beta > 0,
        in_process_engine=config.engine() == "hf",
        slots=rollout.slots,
        engines=vllm.engines,
        tensor_parallel_size=vllm.tensor_parallel_size,
        gpu_memory_utilization=vllm.gpu_memory_utilization,
        max_num_batched_tokens=vllm.max_num_batched_tokens,
        block_size=vllm.block_size,
    )


def memory_estimate(config: RunConfig, shape: ModelShape | None = None) -> MemoryEstimate:
    """The memory estimate of a run of `config` on its cost.gpu."""
    return estimate(memory_settings(config), shape or model_shape(config))
