"""A run's parts, made from its config: the task, and the rollout engine (one factory for
every backend), started and always stopped."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollverify.config import RunConfig
from rollverify.infra.hub import model_folder
from rollverify.rollout.engines.hf_engine import HFEngine
from rollverify.rollout.engines.protocol import RolloutEngine
from rollverify.rollout.tool_calls import ToolCallingEngine
from rollverify.tasks.base import Task
from rollverify.tasks.chain import ChainTask, ChainTaskConfig
from rollverify.tasks.chain_tool import ChainToolTask
from rollverify.tasks.custom_reward import with_reward
from rollverify.tasks.walk import WalkTask


def make_task(config: RunConfig, tokenizer) -> Task:
    """The configured task, with `task.reward` (where set) in place of its own reward."""
    return with_reward(_base_task(config, tokenizer), config.task.reward)


def _base_task(config: RunConfig, tokenizer) -> Task:
    task = config.task
    if task.name in ("chain", "chain_tool", "walk"):
        kind = {"chain_tool": ChainToolTask, "walk": WalkTask}.get(task.name, ChainTask)
        return kind(
            tokenizer,
            ChainTaskConfig(task.max_steps, task.alpha),
            seed=config.train.seed,
            eval_size=task.eval_size,
            eval_seed=task.eval_seed,
            eval_sets=task.eval_sets,
        )
    from rollverify.tasks.math_task import MathTask, ProblemFiles  # math-verify/sympy: if used
    from rollverify.tasks.retool import ReToolTask

    files = ProblemFiles(
        task.train_file,
        task.eval_file,
        seed=config.train.seed,
        eval_size=task.eval_size,
        eval_seed=task.eval_seed,
        eval_files=task.eval_files,
        prompt_field=task.prompt_field,
        prompt_template=task.prompt_template,
        max_prompt_tokens=config.max_prompt_tokens(),
    )
    sandbox = {"tool_timeout_s": task.tool_timeout_s, "tool_memory_mb": task.tool_memory_mb}
    if task.name == "code":
        from rollverify.tasks.code_task import CodeTask

        tests = {"tests_field": task.tests_field, "tests_in_prompt": task.tests_in_prompt}
        return CodeTask(tokenizer, files, **tests, **sandbox)
    if task.name == "retool":
        return ReToolTask(tokenizer, files, task.answer_field, **sandbox)
    return MathTask(tokenizer, files, task.answer_field)


def vllm_settings(config: RunConfig):
    """What each vLLM sidecar is started with, from the config's vllm and rollout sections."""
    from rollverify.rollout.engines.vllm_engine import VLLMSettings

    vllm = config.vllm
    return VLLMSettings(
        model=config.model_path(),  # a hub id as given: each node's sidecar finds its copy
        revision=config.model.revision,
        dtype=config.model.dtype,
        max_model_len=vllm.max_model_len,
        slots_per_engine=config.rollout.slots // vllm.engines,
        engines=vllm.engines,
        tensor_parallel_size=vllm.tensor_parallel_size,
        gpu_memory_utilization=vllm.gpu_memory_utilization,
        enforce_eager=vllm.enforce_eager,
        cpu_kv_cache_gib=vllm.cpu_kv_cache_gib,
        block_size=vllm.block_size,
        max_num_batched_tokens=vllm.max_num_batched_tokens,
        placement=vllm.placement,
        node_resource=vllm.node_resource,
        node_lost_wait_seconds=vllm.node_lost_wait_seconds,
        node_lost=vllm.node_lost,
        weight_sync=vllm.weight_sync,
        engine_args=tuple(vllm.engine_args.items()),
    )


def make_engine(config: RunConfig, model=None, tokenizer=None) -> RolloutEngine:
    """The configured engine, not started yet (see `engine_running`). The in-process engine
    copies `model` (default: the base model of model.path); sidecars load their own."""
    rollout = config.rollout
    if config.engine() == "vllm":
        from rollverify.rollout.engines.vllm_engine import VLLMEngine

        return VLLMEngine(
            vllm_settings(config),
            max_new_tokens=rollout.max_new_tokens,
            temperature=rollout.temperature,
            top_p=rollout.top_p,
            top_k=rollout.top_k,
            seed=config.train.seed,
        )
    folder = model_folder(config.model_path(), config.model.revision)
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(folder)
    return HFEngine(
        model,
        slots=rollout.slots,
        max_new_tokens=rollout.max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        seed=config.train.seed,
        dtype=getattr(torch, config.model.dtype),
        device=engine_device(),
    )


def engine_device() -> torch.device | None:
    """Where the in-process engine generates: this process's GPU where there is one (the
    trainer's, LOCAL_RANK of a torchrun world), else where its model is (the CPU)."""
    if not torch.cuda.is_available():
        return None
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


@contextmanager
def with_tools(engine: RolloutEngine | None, task: Task, config: RunConfig) -> Iterator:
    """The engine, running the task's tool calls where it has a tool (tasks/chain_tool.py):
    it stops at the call's closing marker, the call runs, its output is appended and the
    trajectory goes on (rollout/tool_calls.py), up to task.max_tool_calls. Either engine (hf,
    vLLM): both stop at the tokens in their stop_token_ids. The tool's threads end with the
    run; the engine is left to its owner (a comparison shares it)."""
    make_runner = getattr(task, "tool_runner", None)
    if engine is None or make_runner is None:
        yield engine
        return
    runner = make_runner()
    engine.stop_token_ids = engine.stop_token_ids | {runner.closing_token_id}
    tools = ToolCallingEngine(engine, runner, config.task.max_tool_calls)
    try:
        yield tools
    finally:
        tools.close()


@contextmanager
def engine_running(engine: RolloutEngine, config: RunConfig) -> Iterator[RolloutEngine]:
    """Start the engine (and Ray, for sidecars); always stop both, on errors and Ctrl-C too."""
    if config.engine() == "vllm":
        from rollverify.rollout.engines.ray_runtime import running_engine

        with running_engine(engine, config.vllm.ray_address):
            yield engine
    else:
        engine.start()
        try:
            yield engine
        finally:
            engine.shutdown()


def check_engine_fits(engine: RolloutEngine, config: RunConfig) -> None:
    """A reused engine must have been built for this config's rollout settings."""
    rollout = config.rollout
    for field, wanted, actual in [
        ("slots", rollout.slots, engine.slots),
        ("max_new_tokens", rollout.max_new_tokens, engine.max_new_tokens),
        ("temperature", rollout.temperature, engine.temperature),
        ("top_p", rollout.top_p, engine.top_p),
        ("top_k", rollout.top_k, engine.top_k),
    ]:
        if wanted != actual:
            raise ValueError(
                f"rollout.{field}: {wanted} in the config, but the running engine was started "
                f"with {actual}; use the engine's value or start another engine"
            )
