"""Pass-through options: `train.trl_args` into TRL's GRPOConfig, `vllm.engine_args` into each
vLLM sidecar's engine arguments. Checked when the config loads (the library is imported then,
only when the mapping is not empty): an unknown name is refused with the nearest valid one, a
name rvctl sets itself with the rvctl field to use instead."""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util

from rollverify.config.run_config import RunConfig

# GRPOConfig arguments rvctl sets (training/trl_adapter.py's grpo_arguments), and where to set
# each instead: an rvctl field, or "" where rvctl needs the value it sets.
TRL_OWNED = {
    "output_dir": "",
    "max_steps": "train.steps",
    "per_device_train_batch_size": "train.micro_batch_size",
    "gradient_accumulation_steps": "train.micro_batch_size",
    "steps_per_generation": "train.updates_per_rollout",
    "num_generations": "rollout.group_size",
    "max_completion_length": "rollout.max_new_tokens",
    "temperature": "rollout.temperature",
    "top_p": "rollout.top_p",
    "top_k": "rollout.top_k",
    "learning_rate": "train.learning_rate",
    "warmup_steps": "train.warmup_steps",
    "weight_decay": "train.weight_decay",
    "mask_truncated_completions": "train.mask_truncated",
    "max_grad_norm": "train.max_grad_norm",
    "beta": "train.beta",
    "seed": "train.seed",
    "logging_steps": "",
    "save_strategy": "train.checkpoint_every",
    "report_to": "tracking.report_to",
    "disable_tqdm": "",
    "bf16": "model.dtype",
    "use_cpu": "",
    "gradient_checkpointing": "train.gradient_checkpointing",
    "dataloader_num_workers": "",
    "ddp_find_unused_parameters": "",
    "loss_type": "train.loss_type",
    "epsilon": "train.epsilon",
    "epsilon_high": "train.epsilon_high",
    "fsdp": "train.sharding",
    "fsdp_config": "train.sharding",
    "importance_sampling_level": "train.method",
    "vllm_importance_sampling_correction": "train.method",
    "vllm_importance_sampling_mode": "train.method",
    "vllm_importance_sampling_clip_min": "correction",
    "vllm_importance_sampling_clip_max": "correction",
    "off_policy_mask_threshold": "correction.opsm_delta",
    # not set, but assumed: each rollout trains train.updates_per_rollout steps once, on
    # rvctl's engines, in the model's dtype
    "num_iterations": "train.updates_per_rollout",
    "generation_batch_size": "rollout.batch_groups",
    "use_vllm": "rollout.engine",
    "vllm_mode": "rollout.engine",
    "fp16": "model.dtype",
}

# What rvctl chooses where a run may choose otherwise (through the pass-through mapping).
TRL_DEFAULTS = {"lr_scheduler_type"}  # constant_with_warmup
VLLM_DEFAULTS = {"enable_prefix_caching"}  # on

# vLLM engine arguments rvctl sets (rollout/engines/vllm_settings.py and the sidecar), likewise.
VLLM_OWNED = {
    "model": "model.path",
    "revision": "model.revision",
    "dtype": "model.dtype",
    "max_model_len": "vllm.max_model_len",
    "max_num_seqs": "rollout.slots",
    "seed": "train.seed",
    "tensor_parallel_size": "vllm.tensor_parallel_size",
    "gpu_memory_utilization": "vllm.gpu_memory_utilization",
    "enforce_eager": "vllm.enforce_eager",
    "block_size": "vllm.block_size",
    "max_num_batched_tokens": "vllm.max_num_batched_tokens",
    "worker_extension_cls": "",
    "disable_log_stats": "",
    "logprobs_mode": "rollout.temperature",
    "distributed_executor_backend": "",
    # not set, but assumed: one engine is tensor_parallel_size GPUs of one placement bundle,
    # its tokenizer is the model's, and weight sync loads the model's own tensors
    "pipeline_parallel_size": "vllm.tensor_parallel_size",
    "data_parallel_size": "vllm.engines",
    "tokenizer": "model.path",
    "tokenizer_revision": "model.revision",
    "quantization": "",
    "load_format": "",
}


def check_passthrough(config: RunConfig, problems: list[str]) -> None:
    if config.train.trl_args:
        problems += name_problems(
            "train.trl_args", config.train.trl_args, _grpo_config_names(), TRL_OWNED
        )
    if config.vllm.engine_args and config.engine() == "vllm":  # (unused by the hf engine)
        names = _vllm_engine_names()
        if names is None:
            problems.append(
                "vllm.engine_args: vLLM is not installed here, so its names cannot be "
                "checked; install it (make setup) or remove vllm.engine_args"
            )
        else:
            problems += name_problems(
                "vllm.engine_args", config.vllm.engine_args, names, VLLM_OWNED
            )


def name_problems(field: str, given: dict, valid: set[str], owned: dict[str, str]) -> list[str]:
    """One line per name of `given` that is not in `valid`, or that rvctl sets itself."""
    problems = []
    for name in given:
        if name in owned:
            instead = owned[name]
            fix = f"set {instead} instead" if instead else "rvctl needs the value it sets"
            problems.append(f"{field}.{name}: rvctl decides {name} itself; {fix}")
        elif name not in valid:
            near = difflib.get_close_matches(name, sorted(valid), n=1)
            hint = f"; did you mean {near[0]}?" if near else ""
            problems.append(f"{field}.{name}: no such argument{hint}")
    return problems


def _grpo_config_names() -> set[str]:
    from trl import GRPOConfig

    return {f.name for f in dataclasses.fields(GRPOConfig) if f.init}


def _vllm_engine_names() -> set[str] | None:
    if importlib.util.find_spec("vllm") is None:
        return None
    from vllm.engine.arg_utils import AsyncEngineArgs

    return {f.name for f in dataclasses.fields(AsyncEngineArgs) if f.init}
