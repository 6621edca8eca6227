"""Everything a run needs, checked before anything starts. `check_before_start` is what every
entry point runs (train, resume, compare, each point of a sweep) before torch, an engine or
Ray starts; `rvctl train --dry-run` prints the same checks and a memory estimate. Each check
gives a line of what it found; each problem is one line naming the field and the fix."""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rollverify.config import ConfigError, RunConfig, with_overrides
from rollverify.config.check_links import existing_ancestor
from rollverify.cost.memory_estimate import MemoryEstimate, gib
from rollverify.training.cost_settings import memory_estimate
from rollverify.training.model_check import model_found

__all__ = ["model_found"]  # where its callers found it

TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")

SANDBOXED_TASKS = ("code", "retool")  # their rewards or tool calls run model-written code

Check = Callable[[], tuple[str, list[str]]]  # -> (what was found, problems)


@dataclass
class Preflight:
    checks: list[tuple[str, str]] = field(default_factory=list)  # (what, what was found)
    problems: list[str] = field(default_factory=list)
    estimate: MemoryEstimate | None = None

    def check(self, what: str, found: str, problems: list[str] | None = None) -> None:
        self.checks.append((what, found if not problems else "PROBLEM"))
        self.problems.extend(problems or [])


def check_before_start(config: RunConfig, gpus_here: bool = True) -> None:
    """ConfigError with every problem the run would meet (its data, reward, model, devices,
    output folder, tracking store, Ray cluster). gpus_here=False: the run goes to a Ray
    cluster, whose nodes' GPUs are not this machine's (its trials check their own)."""
    problems = [p for _, check in start_checks(config, gpus_here) for p in check()[1]]
    if problems:
        raise ConfigError(problems)


def check_variants(
    config: RunConfig, variants: dict[str, dict], address: str | None = None
) -> None:
    """For runs that start together (a comparison's pairs, a sweep's grid points): the start
    checks of `config`, then of each variant (named overrides of it), each problem named by
    its variant ("grpo/s0: ...", "grid point ds=abc: ..."); then the cluster's address, in
    seconds (ray.init retries for minutes). With an address, this machine's GPUs are not the
    runs' (their own run() checks their node's)."""
    gpus_here = address is None
    check_before_start(config, gpus_here)
    problems = []
    for name, overrides in variants.items():
        try:
            check_before_start(with_overrides(config, overrides), gpus_here)
        except ConfigError as error:
            problems += [f"{name}: {p}" for p in error.problems]
    if problems:
        raise ConfigError(problems)
    if address is not None:
        from rollverify.rollout.engines.ray_runtime import check_reachable

        check_reachable(address, "--address")


def preflight(config: RunConfig) -> Preflight:
    """The config (already loaded, so valid), the start checks, and the memory estimate."""
    result = Preflight()
    result.check("config", "valid")
    for what, check in start_checks(config):
        result.check(what, *check())
    _estimate(config, result)
    return result


def start_checks(config: RunConfig, gpus_here: bool = True) -> list[tuple[str, Check]]:
    checks: list[tuple[str, Check]] = [
        ("data", lambda: (_data_found(config), _problems(config.check_data)))
    ]
    if config.task.reward is not None:
        checks.append(("reward", lambda: _reward_found(config.task.reward)))
    if config.task.name in SANDBOXED_TASKS:
        checks.append(("sandbox", lambda: sandbox_found(config.task.name)))
    checks.append(("model", lambda: model_found(config)))
    checks.append(("stack", lambda: stack_found(config)))
    if gpus_here:
        checks.append(("devices", lambda: devices_found(config)))
    else:  # (each trial, pair or rank checks its own node's, fsdp too)
        checks.append(("devices", lambda: ("not this machine's", [])))
    checks.append(("output", lambda: output_found(config)))
    checks.append(("tracking", lambda: tracking_found(config)))
    if config.vllm.ray_address is not None and config.engine() == "vllm":
        checks.append(("ray", lambda: ray_found(config.vllm.ray_address)))
    return checks


def sandbox_found(task: str) -> tuple[str, list[str]]:
    """The sandbox a code or retool task runs programs in can be made here (it never runs
    them unisolated: rollverify/tools/sandbox.py)."""
    from rollverify.tools.sandbox import SandboxUnavailable, choose_isolation

    try:
        return choose_isolation(), []
    except SandboxUnavailable as error:
        return "", [f"task.name: {task} runs model-written code, and {error}"]


def sharding_problems(config: RunConfig) -> list[str]:
    import torch

    if config.train.sharding == "fsdp" and not torch.cuda.is_available():
        return [
            "train.sharding: fsdp needs GPUs (accelerate shards CUDA devices only); on a CPU "
            "set it to none"
        ]
    return []


def output_found(config: RunConfig) -> tuple[str, list[str]]:
    """Runs can be written under `output`."""
    why = unwritable(Path(config.output))
    if why:
        return "", [
            f"output: cannot write runs to {config.output} ({why}); pick a folder you can "
            "write (--output)"
        ]
    return config.output, []


def unwritable(folder: Path) -> str | None:
    """Why nothing can be written in `folder` (made if missing), or None. A folder is made and
    removed where it would be: os.access cannot tell (/proc, a read-only mount, root)."""
    existing = existing_ancestor(folder)
    if not existing.is_dir():
        return f"{existing} is a file"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rvctl-check-", dir=existing))
    except OSError as error:
        return f"in {existing}: {error.strerror or type(error).__name__}"
    return None


def tracking_found(config: RunConfig) -> tuple[str, list[str]]:
    """The MLflow store: a sqlite file whose folder can be written, or a server that answers
    (a plain path would be MLflow 3's retired file store)."""
    from urllib.parse import urlsplit

    uri = config.tracking.uri
    if uri is None:
        return f"sqlite in {config.output}", []
    if uri == "databricks" or uri.startswith(("databricks:", "databricks-uc")):
        return uri, []  # (MLflow's own names for a Databricks workspace)
    scheme = urlsplit(uri).scheme.split("+")[0]  # sqlite+pysqlite: a driver named
    if scheme in ("", "file") or len(scheme) == 1:  # a path (C: on Windows)
        where = uri.removeprefix("file://")
        return "", [
            f"tracking.uri: {uri} is a path, MLflow's file store, which MLflow 3 retired; use "
            f"sqlite:///{Path(where).absolute() / 'mlflow.db'} (--tracking-uri)"
        ]
    if scheme not in TRACKING_SCHEMES:
        return "", [
            f"tracking.uri: unknown scheme {scheme!r} in {uri}; use one of "
            f"{', '.join(TRACKING_SCHEMES)} (e.g. sqlite:///runs/mlflow.db)"
        ]
    if scheme == "sqlite":
        path = Path(uri.split(":///", 1)[1] if ":///" in uri else "")
        if path.is_dir():
            return "", [
                f"tracking.uri: {path} is a folder; name the database file, e.g. "
                f"sqlite:///{path / 'mlflow.db'}"
            ]
        if not path.parent.is_dir():  # sqlite makes the file, never its folder
            return "", [
                f"tracking.uri: no folder {path.parent} for the store {path.name}; make it "
                "(mkdir -p) or fix the path"
            ]
        why = unwritable(path.parent)
        if why:
            return "", [f"tracking.uri: cannot write the store {path} ({why}); fix the path"]
        return uri, []
    if scheme in ("http", "https"):
        parts = urlsplit(uri)
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:  # not a number
            return "", [f"tracking.uri: {uri} has no valid port; write http://HOST:PORT"]
        if _proxied(parts.hostname or ""):  # the proxy connects, not this machine
            return uri, []
        import socket

        try:
            socket.create_connection((parts.hostname, port), timeout=5).close()
        except OSError as error:
            why = error.strerror or type(error).__name__
            return "", [
                f"tracking.uri: no MLflow server answers at {uri} ({why}); start it or fix "
                "the address"
            ]
    return uri, []


def _proxied(host: str) -> bool:
    import urllib.request

    return bool(urllib.request.getproxies()) and not urllib.request.proxy_bypass(host)


def ray_found(address: str) -> tuple[str, list[str]]:
    from rollverify.rollout.engines.ray_runtime import check_reachable

    try:
        check_reachable(address, "vllm.ray_address")
    except ValueError as error:
        return "", [str(error)]
    return address, []


def stack_found(config: RunConfig) -> tuple[str, list[str]]:
    """vLLM, torch and CUDA here; a run on a vLLM release nobody checked stops, unless
    vllm.allow_untested (then it warns, once: the start checks run once a run)."""
    from rollverify.infra.vllm_versions import stack, untested_problem

    found = stack()
    problem = untested_problem(found) if config.engine() == "vllm" else None
    if problem is None:
        return found.line(), []
    if config.vllm.allow_untested:
        warnings.warn(
            problem.split("; install")[0] + " (vllm.allow_untested: run anyway)", stacklevel=2
        )
        return found.line() + ", not a checked vLLM", []
    return found.line(), [problem]


def devices_found(config: RunConfig) -> tuple[str, list[str]]:
    """The GPUs the run holds against the GPUs this machine has (a Ray cluster's engines are
    placed when the run starts)."""
    problems = sharding_problems(config)
    trainer = config.train.processes
    engines = config.vllm.engines * config.vllm.tensor_parallel_size
    remote = config.vllm.ray_address is not None
    import torch

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
        result.estimate = memory_estimate(config)
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
    if not config.task.reads_files:
        return f"{config.task.name} task (generated)"
    files = [
        config.task.train_file,
        *(config.task.eval_files or {"": config.task.eval_file}).values(),
    ]
    return ", ".join(str(f) for f in files)


def _reward_found(reward: str) -> tuple[str, list[str]]:
    from rollverify.tasks.custom_reward import load_reward

    return reward, _problems(lambda: load_reward(reward))


def _problems(check) -> list[str]:
    try:
        check()
    except ConfigError as error:
        return list(error.problems)
    return []
