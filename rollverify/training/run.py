"""The training recipe: setup(); train(); cleanup(). What `rvctl train` and `rvctl resume` run.

rvctl train --method rollverify --steps 60 --seed 0
rvctl resume runs/rollverify-s0-20261130-031500
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollverify.atomic import atomic_write_text
from rollverify.checkpoint import Checkpoint, latest
from rollverify.config import ConfigError, RunConfig, load_config
from rollverify.engines.hf_engine import HFEngine
from rollverify.engines.protocol import RolloutEngine
from rollverify.faults import describe
from rollverify.methods import METHODS
from rollverify.tasks.base import Task
from rollverify.tasks.chain import ChainTask, ChainTaskConfig
from rollverify.tracking import MLflowTracker, default_tracking_uri
from rollverify.training.checkpointing import config_changes, restore_loop
from rollverify.training.loop import LoopCallback, TrainingLoop
from rollverify.training.stopping import StopRequest
from rollverify.training.trl_adapter import build_trainer


@dataclass
class RunSummary:
    run_dir: str
    run_id: str
    tracking_uri: str
    method: str
    seed: int
    steps: int
    eval_accuracy_before: float
    eval_accuracy_after: float
    reward_mean_first: float
    reward_mean_last: float
    ops_mean_last: float
    acceptance_window_mean: float | None
    switch_step: int | None
    wall_seconds: float
    device_seconds: float


def make_task(config: RunConfig, tokenizer) -> Task:
    task = config.task
    if task.name == "chain":
        return ChainTask(
            tokenizer,
            ChainTaskConfig(task.max_steps, task.alpha),
            seed=config.train.seed,
            eval_size=task.eval_size,
            eval_seed=task.eval_seed,
        )
    from rollverify.tasks.math_task import MathTask  # math-verify/sympy: import only if used

    return MathTask(
        tokenizer,
        task.train_file,
        task.eval_file,
        seed=config.train.seed,
        eval_size=task.eval_size,
        eval_seed=task.eval_seed,
    )


def vllm_settings(config: RunConfig):
    """What each vLLM sidecar is started with, from the config's vllm and rollout sections."""
    from rollverify.engines.vllm_engine import VLLMSettings

    vllm = config.vllm
    return VLLMSettings(
        model=config.model_path(),
        dtype=config.model.dtype,
        max_model_len=vllm.max_model_len,
        slots_per_engine=config.rollout.slots // vllm.engines,
        engines=vllm.engines,
        tensor_parallel_size=vllm.tensor_parallel_size,
        gpu_memory_utilization=vllm.gpu_memory_utilization,
        enforce_eager=vllm.enforce_eager,
        cpu_kv_cache_gib=vllm.cpu_kv_cache_gib,
    )


def make_engine(config: RunConfig, model, tokenizer) -> RolloutEngine:
    """The configured engine, not started yet (see `engine_running`)."""
    rollout = config.rollout
    if config.engine() == "vllm":
        from rollverify.engines.vllm_engine import VLLMEngine

        return VLLMEngine(
            vllm_settings(config),
            max_new_tokens=rollout.max_new_tokens,
            temperature=rollout.temperature,
            seed=config.train.seed,
        )
    return HFEngine(
        model,
        slots=rollout.slots,
        max_new_tokens=rollout.max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        temperature=rollout.temperature,
        seed=config.train.seed,
    )


@contextmanager
def engine_running(engine: RolloutEngine, config: RunConfig) -> Iterator[RolloutEngine]:
    """Start the engine (and Ray, for sidecars); always stop both, on errors and Ctrl-C too."""
    if config.engine() == "vllm":
        from rollverify.engines.ray_runtime import running_engine

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
    for field in ("slots", "max_new_tokens", "temperature"):
        wanted, actual = getattr(rollout, field), getattr(engine, field)
        if wanted != actual:
            raise ValueError(
                f"rollout.{field}: {wanted} in the config, but the running engine was started "
                f"with {actual}; use the engine's value or start another engine"
            )


def run_dir_for(config: RunConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(config.output) / f"{config.train.method}-s{config.train.seed}-{stamp}"


def train(
    config: RunConfig,
    on_step: Callable[[int, dict[str, float]], None] = lambda step, metrics: None,
    parent_run_id: str | None = None,
    engine: RolloutEngine | None = None,
) -> RunSummary:
    """One training run. `engine`: an already started engine to reuse (it is reset to the base
    weights, version 0); by default the configured engine is started and stopped here."""
    return _with_engine(config, engine, run_dir_for(config), on_step, parent_run_id, None)


def resume(
    run_dir: str | Path,
    overrides: dict[str, Any] | None = None,
    config_path: str | Path | None = None,
    on_step: Callable[[int, dict[str, float]], None] = lambda step, metrics: None,
    engine: RolloutEngine | None = None,
) -> RunSummary:
    """Continue a run from its last good checkpoint, in the same MLflow run.

    The config is the run's own (or `config_path`), with `overrides`; a change that would make
    the rest of the run a different experiment is refused (ConfigError, one line per field).
    """
    run_dir = Path(run_dir)
    checkpoint = _last_good_checkpoint(run_dir)
    base = load_config(config_path if config_path is not None else run_dir / "config.yaml")
    config = base.with_overrides(overrides or {})
    problems = config_changes(checkpoint.state["config"], config.to_dict())
    if config.train.steps <= checkpoint.step:
        problems.append(
            f"train.steps: the run is at step {checkpoint.step} of {config.train.steps}; "
            f"pass --steps N with N > {checkpoint.step} to train further"
        )
    if problems:
        raise ConfigError(problems)
    return _with_engine(config, engine, run_dir, on_step, None, checkpoint)


def _last_good_checkpoint(run_dir: Path) -> Checkpoint:
    if not (run_dir / "config.yaml").is_file():
        raise ValueError(f"RUN_DIR {run_dir}: not a run folder (no config.yaml); check the path")
    checkpoint = latest(run_dir / "checkpoints")
    if checkpoint is None:
        raise ValueError(
            f"RUN_DIR {run_dir}: no good checkpoint in {run_dir / 'checkpoints'}; "
            "start the run again with rvctl train"
        )
    return checkpoint


def _with_engine(
    config: RunConfig,
    engine: RolloutEngine | None,
    run_dir: Path,
    on_step: Callable[[int, dict[str, float]], None],
    parent_run_id: str | None,
    checkpoint: Checkpoint | None,
) -> RunSummary:
    run_dir.mkdir(parents=True, exist_ok=True)
    with run_lock(run_dir):
        if engine is not None:
            check_engine_fits(engine, config)
            with engine.seeded(config.train.seed):  # as if started for this run
                return _run(config, run_dir, engine, on_step, parent_run_id, checkpoint)
        with engine_running(build_engine(config), config) as started:
            return _run(config, run_dir, started, on_step, parent_run_id, checkpoint)


def build_engine(config: RunConfig) -> RolloutEngine:
    """The configured engine for the base model, not started yet."""
    tokenizer = AutoTokenizer.from_pretrained(config.model_path())
    # The in-process engine copies a model; sidecars load their own from model.path.
    base = (
        AutoModelForCausalLM.from_pretrained(config.model_path())
        if config.engine() == "hf"
        else None
    )
    return make_engine(config, base, tokenizer)


def _run(
    config: RunConfig,
    run_dir: Path,
    engine: RolloutEngine,
    on_step: Callable[[int, dict[str, float]], None],
    parent_run_id: str | None,
    checkpoint: Checkpoint | None,
) -> RunSummary:
    """setup (fresh, or from `checkpoint`); train; cleanup."""
    # -- setup ---------------------------------------------------------------------------------
    started = time.perf_counter()
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    torch.manual_seed(config.train.seed)
    method = METHODS[config.train.method]
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(config.to_dict(), sort_keys=False))
    tokenizer = AutoTokenizer.from_pretrained(config.model_path())
    model = AutoModelForCausalLM.from_pretrained(
        config.model_path(), dtype=getattr(torch, config.model.dtype)
    )
    step = 0 if checkpoint is None else checkpoint.step
    if checkpoint is not None:
        model.load_state_dict(checkpoint.tensors["model"])
    task = make_task(config, tokenizer)
    engine.pause()  # a reused engine may hold another run's requests
    engine.load_weights(model.state_dict().items(), version=step)
    tracker = _tracker(config, method.name, run_dir, parent_run_id, checkpoint)
    stop = StopRequest()
    last: dict[str, float] = {}

    def remember(step: int, metrics: dict[str, float]) -> None:
        last.update(metrics)
        on_step(step, metrics)

    # -- train ---------------------------------------------------------------------------------
    status = "FAILED"
    try:
        with stop.listening():
            loop = TrainingLoop(config, method, task, engine, tracker, remember, run_dir, stop)
            trainer = build_trainer(
                config,
                method,
                model,
                tokenizer,
                loop.reward,
                loop.rollout,
                LoopCallback(loop, logged_step=step, resuming=checkpoint is not None),
                output_dir=str(run_dir / "trl"),
            )
            loop.attach(trainer)
            if checkpoint is None:
                loop.eval_before = loop.evaluate()
                tracker.log_metrics({"eval_accuracy": loop.eval_before}, step=0)
                on_step(0, {"eval_accuracy": loop.eval_before})
            else:
                restore_loop(loop, checkpoint)
                trainer.resume_from = checkpoint  # read by the trainer's resume hooks
                if loop.eval_pending:  # a stop skipped it; evaluation leaves training's RNG be
                    tracker.log_metrics({"eval_accuracy": loop.evaluate()}, step=step)
                    loop.eval_pending = False
                on_step(step, {})
            trainer.train(
                resume_from_checkpoint=str(checkpoint.folder) if checkpoint is not None else None
            )
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.finish(status)  # -- cleanup ---------------------------------------------------
    summary = RunSummary(
        run_dir=str(run_dir),
        run_id=tracker.run_id,
        tracking_uri=tracker.uri,
        method=method.name,
        seed=config.train.seed,
        steps=config.train.steps,
        eval_accuracy_before=loop.eval_before,
        eval_accuracy_after=loop.last_eval if loop.last_eval is not None else math.nan,
        reward_mean_first=loop.first_metrics.get("reward_mean", math.nan),
        reward_mean_last=last.get("reward_mean", math.nan),
        ops_mean_last=last.get("ops_mean", math.nan),
        acceptance_window_mean=loop.monitor.window_mean,
        switch_step=loop.monitor.switch_step,
        wall_seconds=time.perf_counter() - started,
        device_seconds=loop.device_seconds,
    )
    atomic_write_text(run_dir / "summary.json", json.dumps(asdict(summary), indent=2) + "\n")
    return summary


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """One process per run folder: a second `rvctl resume` of a running run is refused."""
    import fcntl

    with (run_dir / ".lock").open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunBusy(
                f"RUN_DIR {run_dir}: another process is training this run; wait for it to "
                "end or stop it first"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class RunBusy(RuntimeError):
    exit_code = 2  # a usage error: nothing was touched


def _tracker(
    config: RunConfig,
    method: str,
    run_dir: Path,
    parent_run_id: str | None,
    checkpoint: Checkpoint | None,
) -> MLflowTracker:
    """A new MLflow run, or the checkpoint's run continued (its spooled metrics sent first)."""
    spool = run_dir / "mlflow-spool.jsonl"
    if checkpoint is not None:
        saved = checkpoint.state["mlflow"]
        try:
            return MLflowTracker.attach(saved["tracking_uri"], saved["run_id"], spool=spool)
        except Exception as error:  # the store moved, or the run was deleted
            raise ValueError(
                f"MLflow run {saved['run_id']} in {saved['tracking_uri']} cannot be continued "
                f"({describe(error)}); restore that store"
            ) from None
    return MLflowTracker(
        config.tracking.uri or default_tracking_uri(config.output),
        config.tracking.experiment,
        run_name=run_dir.name,
        params=config.to_dict(),
        tags={
            "method": method,
            "seed": str(config.train.seed),
            "engine": config.engine(),
            "run_dir": str(run_dir.resolve()),
        },
        artifact_root=Path(config.output).resolve() / "mlartifacts",
        parent_run_id=parent_run_id,
        spool=spool,
    )
