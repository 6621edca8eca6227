"""One typed config for a run. Every field documents the rule it follows; `load_config` checks
them all and reports every problem at once, each naming the field and the fix.

    rvctl train --config experiments/default.yaml --method rollverify

Files are short diffs of these defaults (the embedded default: a tiny Qwen3 on the chain task,
CPU, in-process engine). Values linked to each other are checked together in `_check_links`.
Relative paths in a file resolve against its folder, then the working directory, then the
package's shipped data (rollverify/paths.py); a shipped one keeps its name.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from rollverify.methods import METHODS
from rollverify.paths import candidates, canonical, locate, searched


class ConfigError(ValueError):
    """Every problem found in a config, one line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def _field(
    default: Any,
    doc: str,
    check: typing.Callable[[Any], bool] | None = None,
    rule: str = "",
    allow_inf: bool = False,
) -> Any:
    """A config field whose metadata carries its documentation and its rule."""
    metadata = {"doc": doc, "check": check, "rule": rule, "allow_inf": allow_inf}
    return field(default=default, metadata=metadata)


def _positive(x: float) -> bool:
    return x > 0


def _at_least_one(x: int) -> bool:
    return x >= 1


@dataclass
class ModelConfig:
    path: str = _field(
        "models/tiny-qwen3-chain",
        "Folder with a transformers causal LM + tokenizer, or a hub id. Relative: to the "
        "config's folder, else the working directory, else the package's data (the default, "
        "the shipped ~0.6M-parameter Qwen3).",
    )
    dtype: Literal["float32", "bfloat16"] = _field("float32", "Weights dtype; bfloat16 on GPUs.")


@dataclass
class TaskConfig:
    name: Literal["chain", "math"] = _field(
        "chain", "chain: the synthetic long-tail task; math: real math (data/math) on GPUs."
    )
    max_steps: int = _field(
        32, "chain: longest chain; P(n) ~ n^-alpha over 1..max_steps.", _at_least_one, ">= 1"
    )
    alpha: float = _field(1.3, "chain: tail exponent; smaller = heavier tail.", _positive, "> 0")
    train_file: str = _field(
        "data/math/math_train.json", "math: training problems (a path as for model.path)."
    )
    eval_file: str = _field(
        "data/math/math500.json", "math: held-out problems (a path as for model.path)."
    )
    eval_size: int = _field(256, "Held-out problems in each evaluation.", _at_least_one, ">= 1")
    eval_samples: int = _field(
        1, "Samples per eval problem (accuracy = mean reward).", _at_least_one, ">= 1"
    )
    eval_seed: int = _field(
        12345,
        "Seed of the held-out set and of eval sampling (fixed, so "
        "every run is scored on the same problems).",
    )


@dataclass
class RolloutConfig:
    engine: Literal["auto", "hf", "vllm"] = _field(
        "auto",
        "vllm: the vLLM sidecar (Ray actors, section vllm); hf: the in-process transformers "
        "engine; auto: vllm wherever vLLM imports, else hf.",
    )
    slots: int = _field(64, "Trajectories generated at once (engine batch).", _at_least_one, ">= 1")
    batch_groups: int = _field(
        8, "B: complete groups (prompts) trained per step.", _at_least_one, ">= 1"
    )
    group_size: int = _field(8, "G: samples per prompt (GRPO group).", lambda x: x >= 2, ">= 2")
    max_new_tokens: int = _field(
        288, "Token budget per response (chain: the longest is 281).", _at_least_one, ">= 1"
    )
    temperature: float = _field(
        1.0, "Sampling temperature (the loss uses the same).", _positive, "> 0"
    )
    max_inflight_groups: int | None = _field(
        None,
        "Partial methods: most groups in play at once (None: as many as keep the slots "
        "full). Equal to batch_groups, partial rollout never pauses and equals grpo.",
        lambda x: x is None or x >= 1,
        ">= 1 or null",
    )


@dataclass
class VerifyConfig:
    ops_metric: Literal["abs_ratio", "abs_log_ratio", "k3"] = _field(
        "abs_ratio", "Token OPS: |r-1|, |log r| or k3 (spec)."
    )
    ds: float = _field(
        0.01,
        "Sequence-stage threshold on a segment's mean OPS; inf disables. The paper's 0.01; on "
        "the tiny default (lr 5e-4) it keeps 66-97% of cached tokens early, ~100% later.",
        _positive,
        "> 0 (inf allowed)",
        allow_inf=True,
    )
    dt: float = _field(
        2.0,
        "Token-stage threshold on one token's OPS; inf disables.",
        _positive,
        "> 0 (inf allowed)",
        allow_inf=True,
    )
    window: int = _field(8, "Acceptance-rate window (cycles).", _at_least_one, ">= 1")
    switch_threshold: float = _field(
        0.5, "Switch to on-policy when the window mean is below.", lambda x: 0 < x <= 1, "in (0, 1]"
    )
    staleness_bound: int = _field(
        2,
        "staleness-filter: drop samples staler than this many versions.",
        lambda x: x >= 0,
        ">= 0",
    )
    ops_bound: float = _field(
        0.05, "ops-filter: drop samples whose sequence OPS exceeds this.", _positive, "> 0"
    )


@dataclass
class TrainConfig:
    method: str = _field(
        "rollverify",
        f"One of: {', '.join(METHODS)}.",
        lambda x: x in METHODS,
        f"one of {', '.join(METHODS)}",
    )
    steps: int = _field(60, "Optimizer steps.", _at_least_one, ">= 1")
    seed: int = _field(
        0, "Seeds data order, sampling and initial RNG.", lambda x: 0 <= x < 2**32, "in [0, 2**32)"
    )
    learning_rate: float = _field(
        5e-4,
        "AdamW learning rate (constant after warmup). Tiny default: 1e-3 oscillates after ~20 "
        "steps (measured), 5e-4 climbs steadily.",
        _positive,
        "> 0",
    )
    warmup_steps: int = _field(0, "Linear warmup steps.", lambda x: x >= 0, ">= 0")
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = _field(
        "dapo", "TRL loss aggregation for methods that keep the clipped surrogate."
    )
    epsilon: float = _field(0.2, "Clip range of the ratio pi/mu (low side).", _positive, "> 0")
    epsilon_high: float = _field(
        0.28, "Clip range, high side (DAPO clip-higher).", _positive, "> 0"
    )
    beta: float = _field(
        0.0, "KL coefficient to the base model (0: no reference model).", lambda x: x >= 0, ">= 0"
    )
    max_grad_norm: float = _field(1.0, "Gradient clipping.", _positive, "> 0")
    threads: int = _field(0, "torch threads (0: leave torch's default).", lambda x: x >= 0, ">= 0")
    devices: int = _field(
        1,
        "Devices the trainer holds, for the cost ledger (GPUs; on CPU 1, its process). The "
        "engines hold vllm.engines x vllm.tensor_parallel_size more.",
        _at_least_one,
        ">= 1",
    )
    checkpoint_every: int = _field(
        10,
        "Write a checkpoint every this many steps (also at the end and on SIGINT/SIGTERM); "
        "0: only then. `rvctl resume RUN_DIR` continues from the last good one.",
        lambda x: x >= 0,
        ">= 0",
    )
    keep_checkpoints: int = _field(
        3, "Checkpoints kept per run (the newest).", _at_least_one, ">= 1"
    )
    eval_every: int = _field(
        20,
        "Evaluate every this many steps (and at the end); 0: only at the start and the end.",
        lambda x: x >= 0,
        ">= 0",
    )


@dataclass
class VLLMConfig:
    engines: int = _field(
        1,
        "Sidecar engines, one Ray actor each; rollout.slots are split evenly between them.",
        _at_least_one,
        ">= 1",
    )
    tensor_parallel_size: int = _field(
        1, "GPUs per engine (tensor parallel).", _at_least_one, ">= 1"
    )
    gpu_memory_utilization: float = _field(
        0.85, "Share of each GPU vLLM may use (GPU only).", lambda x: 0 < x <= 1, "in (0, 1]"
    )
    max_model_len: int = _field(
        512, "Longest prompt + response (>= prompt + max_new_tokens).", _at_least_one, ">= 1"
    )
    enforce_eager: bool = _field(
        True, "No CUDA graphs / compilation (required on CPU; set false on GPUs for speed)."
    )
    cpu_kv_cache_gib: int = _field(
        1,
        "CPU only: KV cache per engine, whole GiB (vLLM's automatic size took ~45 s to warm up "
        "on 2 cores, measured).",
        _at_least_one,
        ">= 1",
    )
    sync_check_tolerance: float = _field(
        1e-3,
        "After each weight sync the engine's log-probs of a probe sequence must match "
        "the trainer's within this (fp32: 1e-3; bf16 needs more: 0.1 in the GPU config).",
        _positive,
        "> 0",
    )
    ray_address: str | None = _field(
        None, "Ray cluster to join (None: a private local Ray on 127.0.0.1)."
    )


@dataclass
class TrackingConfig:
    uri: str | None = _field(None, "MLflow tracking URI; None: sqlite file in the output folder.")
    experiment: str = _field("rollverify", "MLflow experiment name.")


@dataclass
class CostConfig:
    gpu: Literal["a100", "h100", "h200", "b200"] = _field(
        "h100",
        "The GPU whose spec sheet prices each step's work (rollverify/costmodel.py): the "
        "modeled_* metrics and modeled_gpu_days, beside the measured device-seconds.",
    )
    layout: Literal["auto", "colocated", "disaggregated"] = _field(
        "auto",
        "colocated: the same GPUs roll out, then train (max of train.devices and the engines' "
        "GPUs); disaggregated: the engines' GPUs (vllm.engines x tensor_parallel_size) beside "
        "the trainer's; auto: colocated for the in-process engine, disaggregated for vLLM.",
    )


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    output: str = _field("runs", "Folder for run outputs (one subfolder per run).")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def engine(self) -> str:
        """rollout.engine with "auto" resolved: vllm where vLLM is installed, else hf."""
        if self.rollout.engine != "auto":
            return self.rollout.engine
        import importlib.util

        return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"

    def with_overrides(self, overrides: dict[str, Any]) -> RunConfig:
        """A checked copy with dotted fields replaced ({"train.seed": 1}; None: keep)."""
        from rollverify.dicts import flatten

        wanted = {k: v for k, v in overrides.items() if v is not None}
        return load_config(overrides=flatten(self.to_dict()) | wanted)

    def device_layout(self):
        """Devices the run holds, for the cost ledger (rollverify/ledger.py)."""
        from rollverify.ledger import DeviceLayout

        engines = self.vllm.engines * self.vllm.tensor_parallel_size
        return DeviceLayout(self.train.devices, engines if self.engine() == "vllm" else 0)

    def cost_layout(self):
        """The GPUs the cost model prices this run on (rollverify/costmodel.Layout)."""
        from rollverify.costmodel import Layout

        kind = self.cost.layout
        if kind == "auto":
            kind = "disaggregated" if self.engine() == "vllm" else "colocated"
        if self.engine() == "vllm":
            return Layout(
                kind, self.train.devices, self.vllm.engines, self.vllm.tensor_parallel_size
            )
        return Layout(kind, self.train.devices)  # the in-process engine: one, on one GPU

    def model_path(self) -> str:
        """The local model folder (a relative one: in the working directory, else the
        package's data), or a hub id as given."""
        found = locate(self.model.path)
        return str(found) if found is not None else self.model.path


def load_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> RunConfig:
    """Defaults <- YAML file <- overrides ({"train.steps": 10}); all problems raised at once."""
    data: dict[str, Any] = {}
    folder = None  # relative paths: from here first
    if path is not None:
        found = locate(path)  # a shipped config by its name, where nothing here has that name
        path = found if found is not None and found.is_file() else Path(path)
        data = _read_yaml(path)
        folder = path.parent
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, key = dotted.rpartition(".")
        target = data.setdefault(section, {}) if section else data
        if not isinstance(target, dict):
            raise ConfigError([f"{section}: must be a mapping to set {dotted}"])
        target[key] = value
    problems: list[str] = []
    config = _build(RunConfig, data, "", problems)
    if not problems:
        _resolve_paths(config, folder, problems)
        _check_links(config, problems)
    if problems:
        raise ConfigError(problems)
    return config


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(
            [f"--config {path}: cannot read it ({error.strerror}); check the path"]
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(
            [f"--config {path}: malformed YAML{where}; fix the syntax there"]
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"--config {path}: the top level must be a mapping of sections"])
    return data


def _build(cls: type, data: Any, prefix: str, problems: list[str]) -> Any:
    if data is None and prefix:  # an empty section ("train:" and nothing under it)
        data = {}
    if not isinstance(data, dict):
        problems.append(f"{prefix.rstrip('.')}: must be a mapping, got {_show(data)}")
        return cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in data:
        if key not in fields:
            near = difflib.get_close_matches(str(key), fields, n=1)
            hint = f"; did you mean {prefix}{near[0]}?" if near else f"; known: {', '.join(fields)}"
            name = str(key) if str(key).isprintable() and str(key).strip() else repr(key)
            problems.append(f"{prefix}{name}: unknown key{hint}")
    values = {}
    for name, f in fields.items():
        if name not in data:
            continue
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            values[name] = _build(hint, data[name], f"{prefix}{name}.", problems)
            continue
        value, problem = _coerce(data[name], hint)
        infinite = problem is None and isinstance(value, float) and math.isinf(value)
        if infinite and not f.metadata.get("allow_inf"):
            problem = f"must be finite, got {_show(value)}"
        if problem:
            problems.append(f"{prefix}{name}: {problem}")
            continue
        check, rule = f.metadata.get("check"), f.metadata.get("rule")
        if check is not None and not check(value):
            problems.append(f"{prefix}{name}: must be {rule}, got {_show(value)}")
            continue
        values[name] = value
    try:
        return cls(**values)
    except TypeError:  # only reachable if a nested section failed; its problem is recorded
        return cls()


def _coerce(value: Any, hint: Any) -> tuple[Any, str | None]:
    """Check `value` against a type hint; YAML's "inf"/".inf" strings become float('inf')."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None, None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0])
    if origin is Literal:
        if value in args:
            return value, None
        near = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
        hint_text = f"; did you mean {near[0]!r}?" if near else ""
        return None, f"must be one of {', '.join(map(str, args))}, got {_show(value)}{hint_text}"
    if hint is bool:
        return (
            (value, None)
            if isinstance(value, bool)
            else (None, f"must be true or false, got {_show(value)}")
        )
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value, None
        return None, f"must be an integer, got {_show(value)}"
    if hint is float:
        # YAML 1.1 reads 1e-3 (no dot) as a string and spells infinity .inf: accept both.
        text = value.strip().lower().lstrip(".") if isinstance(value, str) else None
        try:
            number = float(text) if text is not None else float(value)
        except (TypeError, ValueError, OverflowError):
            return None, f"must be a number, got {_show(value)}"
        if isinstance(value, bool) or math.isnan(number):
            return None, f"must be a number, got {_show(value)}"
        return number, None
    if hint is str:
        return (
            (value, None)
            if isinstance(value, str)
            else (None, f"must be a string, got {_show(value)}")
        )
    return value, None


def _resolve_paths(config: RunConfig, folder: Path | None, problems: list[str]) -> None:
    """Relative paths from `folder`, the working directory or the package's data; each made
    absolute where found outside the package, reported where found nowhere."""
    model = config.model.path
    found = locate(model, folder)
    if found is not None and found.is_dir():
        config.model.path = canonical(model, folder)
    elif not _is_hub_id(model, folder):
        problems.append(
            f"model.path: no model folder {searched(model, folder)}; fix the path (the default "
            "is rebuilt by `python -m rollverify.tiny.build --out "
            "rollverify/assets/models/tiny-qwen3-chain`)"
        )
    for name in ("train_file", "eval_file"):
        given = getattr(config.task, name)
        found = locate(given, folder)
        if found is not None and found.is_file():
            setattr(config.task, name, canonical(given, folder))
        elif config.task.name == "math":
            problems.append(
                f"task.{name}: no file {searched(given, folder)}; point it to a JSON list of "
                "problems (see rollverify/assets/data/math/PROVENANCE.md)"
            )


def _check_links(config: RunConfig, problems: list[str]) -> None:
    rollout = config.rollout
    if (
        rollout.max_inflight_groups is not None
        and rollout.max_inflight_groups < rollout.batch_groups
    ):
        problems.append(
            "rollout.max_inflight_groups: must be >= rollout.batch_groups "
            f"({rollout.batch_groups}), got {rollout.max_inflight_groups}; raise it or set null"
        )
    if config.rollout.slots % config.vllm.engines:
        problems.append(
            f"vllm.engines: rollout.slots ({config.rollout.slots}) must split evenly over "
            f"{config.vllm.engines} engines; change either"
        )
    if config.vllm.max_model_len <= rollout.max_new_tokens:
        problems.append(
            f"vllm.max_model_len: must exceed rollout.max_new_tokens ({rollout.max_new_tokens}) "
            f"by the longest prompt, got {config.vllm.max_model_len}; raise it"
        )
    if config.train.epsilon_high < config.train.epsilon:
        problems.append(
            f"train.epsilon_high: must be >= train.epsilon ({config.train.epsilon}), got "
            f"{config.train.epsilon_high}"
        )
    unwritable = _unwritable(Path(config.output))
    if unwritable:
        problems.append(
            f"output: cannot write runs to {config.output} ({unwritable}); pick a folder you can "
            "write (--output)"
        )


def _unwritable(folder: Path) -> str | None:
    """Why runs could not be written under `folder` (created if missing), or None."""
    existing = folder.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"no write permission on {existing}"
    return None


def _is_hub_id(path: str, folder: Path | None = None) -> bool:
    """Qwen/Qwen3-8B-Base: an organisation/name on the model hub, not a local folder (none of
    the places a relative path is looked for has a folder named like its first part)."""
    parts = path.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not any(c.exists() for c in candidates(parts[0], folder))
        and not path.startswith(".")
    )


def _show(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
