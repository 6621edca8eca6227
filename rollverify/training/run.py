"""The training recipe: setup(); train(); cleanup(). What `rvctl train` and `rvctl resume` run.

rvctl train --method rollverify --steps 60 --seed 0
rvctl resume runs/rollverify-s0-20261130-031500-3f2a9c01

With train.processes > 1, `run` starts that many workers through torchrun (launch.py); each
runs this recipe as one rank of the world (world.py): rank 0 with the engine, MLflow and the
checkpoints, every rank with the model and its share of each batch. The run's folder (its
name, its lock) is run_folder.py's; its MLflow run is run_tracking.py's.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollverify.config import ConfigError, RunConfig
from rollverify.core.methods import METHODS
from rollverify.infra.atomic_write import atomic_write_text
from rollverify.infra.faults import describe
from rollverify.infra.hub import model_folder
from rollverify.infra.kill_points import kill_point
from rollverify.rollout.engines.protocol import RolloutEngine
from rollverify.tasks.base import Task
from rollverify.tracking.metric_names import EVAL_ACCURACY
from rollverify.training.checkpoint.run_state import restore_loop
from rollverify.training.distributed.world import World
from rollverify.training.launch import launch
from rollverify.training.loop import TrainingLoop
from rollverify.training.parts import (
    check_engine_fits,
    engine_running,
    make_engine,
    make_task,
    with_tools,
)
from rollverify.training.preflight import check_before_start, sharding_problems
from rollverify.training.records import evaluation_metrics
from rollverify.training.resume_plan import RunFinished, resume_plan
from rollverify.training.run_end import finished_run, store_artifacts, summary_of, write_summary
from rollverify.training.run_folder import run_dir_for, run_lock
from rollverify.training.run_plan import RunPlan, RunSummary
from rollverify.training.run_tracking import run_tracker
from rollverify.training.stopping import RunInterrupted, StopRequest
from rollverify.training.weight_sync import WeightStream


def train(
    config: RunConfig,
    on_step: Callable[[int, dict[str, float]], None] = lambda step, metrics: None,
    parent_run_id: str | None = None,
    engine: RolloutEngine | None = None,
) -> RunSummary:
    """One training run in a new folder under `config.output`."""
    return run(RunPlan(config, run_dir_for(config), None, parent_run_id, on_step, engine))


def resume(
    run_dir: str | Path,
    overrides: dict[str, Any] | None = None,
    config_path: str | Path | None = None,
    on_step: Callable[[int, dict[str, float]], None] = lambda step, metrics: None,
    engine: RolloutEngine | None = None,
    parent_run_id: str | None = None,
) -> RunSummary:
    """Continue a run from its last good checkpoint (resume_plan says how). parent_run_id:
    for a run killed before its MLflow run existed (a comparison's child). A run at its last
    step raises RunFinished, its end completed first if a stop cut it off (run_end.py)."""
    try:
        plan = resume_plan(run_dir, overrides, config_path, on_step, engine, parent_run_id)
    except RunFinished as finished:
        finished_run(finished.run_dir)
        raise
    return run(plan)


def run(plan: RunPlan) -> RunSummary:
    """setup; train; cleanup. The folder and its config come first, so a run killed at any
    later moment (loading the model, starting engines) can be resumed. Every rank of a world
    runs this with the same plan (worker.py); train.processes > 1 started from one process
    launches them (launch.py), each running this recipe."""
    world = World.joined()
    if world.main:  # (a launcher checks before its workers start; its rank 0 again)
        _check_inputs(plan.config, world)
    if world.size == 1 and plan.config.train.processes > 1:
        return launch(plan, prepare=prepare_folder)
    _check_world(plan.config, world)
    with _run_folder(plan, world):  # rank 0's: made, config.yaml written, locked
        started = time.perf_counter()
        parts = setup(plan)
        with _engine(plan, parts, world) as engine:  # cleanup: stopped on the way out
            return _train(plan, parts, engine, started, world)


@dataclass
class Parts:
    """What a run trains: the task (its data read), the tokenizer and the model (at the
    checkpoint's weights when resuming)."""

    tokenizer: Any
    task: Task
    model: Any


def setup(plan: RunPlan) -> Parts:
    """Seeds and threads, then the tokenizer, the task and the model, in that order (the
    task's data is read, or refused, before the model loads)."""
    config = plan.config
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    torch.manual_seed(config.train.seed)
    folder = model_folder(config.model_path(), config.model.revision)  # (a hub id: cached)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    task = make_task(config, tokenizer)
    dtype = getattr(torch, config.master_dtype())
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    if plan.checkpoint is not None:
        model.load_state_dict(plan.checkpoint.tensors["model"])
    return Parts(tokenizer, task, model)


def _check_inputs(config: RunConfig, world: World) -> None:
    """The config against this machine. Its GPUs are counted by whoever starts the run on
    it: not by a rank of a world (a multi-node torchrun's node has a share of them) nor in a
    Ray worker (a sweep trial, a comparison's pair: Ray shows it the GPUs it holds, engines
    hold their own)."""
    gpus_here = world.size == 1 and not _in_ray_worker()
    check_before_start(config, gpus_here)
    problems = [] if gpus_here else sharding_problems(config)  # (this node's CUDA)
    if problems:
        raise ConfigError(problems)


def _check_world(config: RunConfig, world: World) -> None:
    if world.size != config.train.processes:
        raise ConfigError(
            [
                f"train.processes: {config.train.processes}, but torchrun started "
                f"{world.size} processes (--nnodes x --nproc-per-node); make them agree"
            ]
        )


@contextmanager
def _run_folder(plan: RunPlan, world: World) -> Iterator[None]:
    """Rank 0: the run's folder and config.yaml, under its lock for the whole run."""
    if not world.main:
        yield
        return
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    with run_lock(plan.run_dir):
        _write_config(plan)
        yield


@contextmanager
def _engine(plan: RunPlan, parts: Parts, world: World) -> Iterator[RolloutEngine | None]:
    """Rank 0's engine (None on the other ranks) with the task's tools, at the run's weights."""
    config = plan.config
    with (
        _engine_for(plan, parts.model, parts.tokenizer) if world.main else nullcontext() as engine,
        with_tools(engine, parts.task, config) as engine,
    ):
        if engine is not None:
            engine.pause()  # a reused engine may hold another run's requests
            engine.load_weights(WeightStream(parts.model, config.model.dtype), version=plan.step)
        yield engine


def prepare_folder(plan: RunPlan) -> None:
    """A launched run's folder, before its workers start (its inputs checked by run()):
    config.yaml and its MLflow run (a child of plan.parent_run_id from the start; rank 0
    continues it)."""
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    _write_config(plan)
    if plan.checkpoint is None:
        run_tracker(plan, METHODS[plan.config.train.method].name)


def _start_from(plan: RunPlan, loop: TrainingLoop, tracker) -> None:
    """Rank 0, before TRL's loop: step 0's evaluation (the base model), or the checkpoint's
    loop state and the evaluation a stop skipped (evaluating leaves the training's RNG be)."""
    if plan.checkpoint is None and not plan.config.train.evaluate:
        plan.on_step(0, {})
        return
    if plan.checkpoint is None:
        before = evaluation_metrics(loop.evaluate())
        loop.counters.eval_before = before[EVAL_ACCURACY]
        tracker.log_metrics(before, step=0)
        plan.on_step(0, before)
        return
    restore_loop(loop, plan.checkpoint)
    if loop.counters.eval_pending:
        tracker.log_metrics(evaluation_metrics(loop.evaluate()), step=plan.step)
        loop.counters.eval_pending = False
    plan.on_step(plan.step, {})


def _in_ray_worker() -> bool:
    import sys

    if "ray" not in sys.modules:
        return False
    import ray

    return ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE


def _write_config(plan: RunPlan) -> None:
    text = yaml.safe_dump(plan.config.to_dict(), sort_keys=False)
    atomic_write_text(plan.run_dir / "config.yaml", text)


@contextmanager
def _engine_for(plan: RunPlan, model, tokenizer) -> Iterator[RolloutEngine]:
    if plan.engine is not None:
        check_engine_fits(plan.engine, plan.config)
        with plan.engine.seeded(plan.config.train.seed):  # as if started for this run
            yield plan.engine
        return
    with engine_running(make_engine(plan.config, model, tokenizer), plan.config) as engine:
        yield engine


def _train(
    plan: RunPlan, parts: Parts, engine: RolloutEngine | None, started: float, world: World
) -> RunSummary:
    """The MLflow run, the loop and its trainer; step 0's evaluation (or a resumed run's
    pending one); TRL's training loop to the last step; the end's writes (run_end.py: after the
    last checkpoint, summary.json, then the MLflow run's artifacts and FINISHED).
    engine: rank 0's; the other ranks have none, nor an MLflow run."""
    config, checkpoint = plan.config, plan.checkpoint
    method = METHODS[config.train.method]
    tracker = run_tracker(plan, method.name) if world.main else None
    kill_point("setup", plan.step)  # tests: folder, config and MLflow run made, no checkpoint
    stop = StopRequest(config.train.stop_grace_seconds)
    status, loop = "FAILED", None
    try:
        with stop.listening():
            loop = TrainingLoop(
                config=config,
                method=method,
                task=parts.task,
                engine=engine,
                tracker=tracker,
                model=parts.model,
                tokenizer=parts.tokenizer,
                on_step=plan.on_step,
                run_dir=plan.run_dir,
                stop=stop,
                start_step=plan.step,
                world=world,
            )
            if world.main:  # the evaluations and the loop's state are rank 0's
                _start_from(plan, loop, tracker)
            loop.trainer.resume_from = checkpoint  # read by the trainer's resume hooks
            loop.trainer.train(
                resume_from_checkpoint=str(checkpoint.folder) if checkpoint is not None else None
            )
        summary = None
        if world.main:  # the end's writes, in run_end.py's order
            summary = summary_of(plan, loop, time.perf_counter() - started)
            kill_point("end-summary", config.train.steps)  # tests: last checkpoint, no summary
            write_summary(plan.run_dir, summary)
        summary = world.broadcast(summary)
        status = "FINISHED"
    except KeyboardInterrupt as interrupt:
        status = "KILLED"
        saved = loop.checkpoints.last_good() if loop is not None else None
        if stop.grace_expired and not isinstance(interrupt, RunInterrupted) and saved is not None:
            raise RunInterrupted(
                saved,
                plan.run_dir,
                f"train.stop_grace_seconds ({stop.grace:g} s) ran out in the middle of a step; "
                f"the run continues from its checkpoint of step {saved}",
            ) from None
        raise
    finally:
        if loop is not None:
            loop.close()
        if tracker is not None:
            if world.main and status == "FINISHED":  # a stop's grace is not spent on them
                try:
                    store_artifacts(plan.run_dir, tracker, plan.config.tracking.plots)
                except Exception as error:  # the run's results are in its folder anyway
                    warnings.warn(f"MLflow artifacts not stored: {describe(error)}", stacklevel=2)
            tracker.finish(status)
    return summary
