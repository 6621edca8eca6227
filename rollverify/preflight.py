"""Everything a run needs, checked before anything starts: what `rvctl train --dry-run` prints
(and run() refuses on). Each check gives a line of what it found; each problem is one line
naming the field and the fix."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rollverify.config import ConfigError, RunConfig
from rollverify.config.check_links import existing_ancestor
from rollverify.memory_estimate import MemoryEstimate, estimate, gib

WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")


@dataclass
class Preflight:
    checks: list[tuple[str, str]] = field(default_factory=list)  # (what, what was found)
    problems: list[str] = field(default_factory=list)
    estimate: MemoryEstimate | None = None

    def check(self, what: str, found: str, problems: list[str] | None = None) -> None:
        self.checks.append((what, found if not problems else "PROBLEM"))
        self.problems.extend(problems or [])


def preflight(config: RunConfig) -> Preflight:
    """The config (already loaded, so valid), its data, reward, model, devices and memory."""
    result = Preflight()
    result.check("config", "valid")
    result.check("data", _data_found(config), _problems(config.check_data))
    if config.task.reward is not None:
        from rollverify.tasks.custom_reward import load_reward

        result.check(
            "reward", config.task.reward, _problems(lambda: load_reward(config.task.reward))
        )
    found, problems = model_found(config)
    result.check("model", found, problems)
    found, problems = devices_found(config)
    result.check("devices", found, problems)
    _estimate(config, result)
    return result


def sharding_problems(config: RunConfig) -> list[str]:
    if config.train.sharding == "fsdp" and not torch.cuda.is_available():
        return [
            "train.sharding: fsdp needs GPUs (accelerate shards CUDA devices only); on a CPU "
            "set it to none"
        ]
    return []


def model_found(config: RunConfig) -> tuple[str, list[str]]:
    """A local folder must hold a config and weights; a hub id is looked up in the local
    Hugging Face cache (never the network)."""
    path = config.model_path()
    folder = Path(path)
    if folder.is_dir():
        weights = [p for pattern in WEIGHT_FILES for p in folder.glob(pattern)]
        missing = [
            n
            for n, ok in (
                ("config.json", (folder / "config.json").is_file()),
                ("weights (*.safetensors)", bool(weights)),
            )
            if not ok
        ]
        if missing:
            return "", [
                f"model.path: {path} has no {' and no '.join(missing)}; point it to a "
                "model folder (save_pretrained writes both)"
            ]
        return f"{path} (local folder)", []
    if path.startswith((".", "/", "~")) or path.count("/") > 1:
        return "", [f"model.path: no folder {path}; check the path"]
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(path, "config.json")
    except Exception:  # not a valid hub id either
        return "", [f"model.path: {path} is neither a folder nor a hub id; check it"]
    if isinstance(cached, str):
        return f"{path} (in the Hugging Face cache)", []
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return "", [
            f"model.path: {path} is not in the local Hugging Face cache and "
            "HF_HUB_OFFLINE=1; download it (hf download ID) or point model.path to a "
            "folder"
        ]
    return f"{path} (not cached here: downloaded from the hub at start)", []


def devices_found(config: RunConfig) -> tuple[str, list[str]]:
    """The GPUs the run holds against the GPUs this machine has (a Ray cluster's engines are
    placed when the run starts)."""
    problems = sharding_problems(config)
    trainer = config.train.processes
    engines = config.vllm.engines * config.vllm.tensor_parallel_size
    remote = config.vllm.ray_address is not None
    here = torch.cuda.device_count()
    if here == 0:
        found = f"no GPU here: {trainer} trainer process(es) on the CPU"
        if config.engine() == "vllm":
            found += f", {config.vllm.engines} vLLM engine(s) on the CPU"
        return found, problems
    wanted = trainer + (engines if config.engine() == "vllm" and not remote else 0)
    if wanted > here:
        problems.append(
            f"train.processes {trainer} + vllm.engines x tensor_parallel_size {engines} need "
            f"{wanted} GPUs, this machine has {here}; lower them, or give vllm.ray_address"
        )
    where = f" + engines on the Ray cluster {config.vllm.ray_address}" if remote else ""
    return f"{wanted} of this machine's {here} GPUs{where}", problems


def _estimate(config: RunConfig, result: Preflight) -> None:
    try:
        result.estimate = estimate(config)
    except ValueError as error:  # no config.json anywhere: said by the model check
        result.checks.append(("memory", f"no estimate ({error})"))
        return
    memory = result.estimate
    result.problems.extend(memory.problems())
    needed = memory.checkpoint_bytes * (config.train.keep_checkpoints + 1)  # + one being written
    free = shutil.disk_usage(existing_ancestor(Path(config.output))).free
    found = f"{gib(needed):.1f} GiB for {config.train.keep_checkpoints} + 1 checkpoints, "
    found += f"{gib(free):.0f} GiB free"
    if needed > free:
        result.check(
            "disk",
            found,
            [
                f"train.keep_checkpoints: {config.train.keep_checkpoints} checkpoints (+ one "
                f"being written) of ~{gib(memory.checkpoint_bytes):.1f} GiB need more than the "
                f"{gib(free):.0f} GiB "
                f"free under {config.output}; keep fewer or write elsewhere (output)"
            ],
        )
    else:
        result.check("disk", found)


def _data_found(config: RunConfig) -> str:
    if config.task.name == "chain":
        return "chain task (generated)"
    files = [
        config.task.train_file,
        *(config.task.eval_files or {"": config.task.eval_file}).values(),
    ]
    return ", ".join(str(f) for f in files)


def _problems(check) -> list[str]:
    try:
        check()
    except ConfigError as error:
        return list(error.problems)
    return []
