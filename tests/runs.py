"""Helpers for end-to-end runs on the shipped tiny model: the config, and reading back what a
run logged to MLflow or saved in its checkpoints."""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

from benchmarks.tiny_run import TINY, tiny_file
from rollverify.config import RunConfig, load_config
from rollverify.rollout.trajectory import TrajectoryCache
from rollverify.tracking.reproducibility import comparable, metric_history
from rollverify.training.checkpoint.files import folder_for
from rollverify.training.checkpoint.files import load as load_checkpoint

__all__ = ["TINY", "comparable", "metric_history", "tiny_file"]  # where the tests found them


def tiny(tmp_path, method: str, *, store: bool = True, **overrides) -> RunConfig:
    """The tiny run of `method`, writing under tmp_path; overrides: dotted keys (load_config).
    Its output folder starts with an empty MLflow store (`seed_store`), unless `store` is
    False (a test that nothing is written)."""
    settings = TINY | {"train.method": method, "output": str(tmp_path)}
    config = load_config(overrides=settings | overrides)
    if store and config.tracking.uri is None:
        seed_store(Path(config.output))
    return config


@functools.cache
def _empty_store() -> Path:
    path = Path(tempfile.mkdtemp(prefix="empty-store-")) / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()  # MLflow creates its tables
    return path


def seed_store(output: Path) -> None:
    """A copy of an empty MLflow store, its tables made, as the output folder's store (unless
    it has one): a new sqlite store runs MLflow's schema migrations, 1.5 s here, in every one
    of the suite's ~150 runs. The CLI tests make theirs the user's way."""
    output.mkdir(parents=True, exist_ok=True)
    store = output / "mlflow.db"
    if not store.exists():
        shutil.copy(_empty_store(), store)


def history(summary) -> dict[str, dict[int, float]]:
    """Every metric of a finished run: name -> {step: value}."""
    assert MlflowClient(summary.tracking_uri).get_run(summary.run_id).info.status == "FINISHED"
    return metric_history(summary.tracking_uri, summary.run_id)


def cached(run_dir: str | Path, step: int | None = None) -> TrajectoryCache:
    """The partial-rollout cache saved in a run's checkpoint of `step` (default: the last)."""
    root = Path(run_dir) / "checkpoints"
    folder = folder_for(root, step) if step is not None else sorted(root.glob("step-*"))[-1]
    saved = load_checkpoint(folder)
    return TrajectoryCache.from_tensors(saved.tensors["cache"], saved.state["cache"])


def unfinished(cache: TrajectoryCache) -> list:
    """Trajectories waiting to resume (not those waiting for their group)."""
    return [t for t in cache if not t.finished]


def stopped_after(config: RunConfig, step: int) -> Path:
    """`config` trained until a SIGTERM as step `step` ends (a preemption): the stopped run's
    folder. Signal handlers need the main thread: elsewhere the test is skipped."""
    import os
    import signal
    import threading

    import pytest

    from rollverify.training.run import train
    from rollverify.training.stopping import RunInterrupted

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be set in the main thread")

    def preempt(at: int, metrics: dict) -> None:
        if at == step:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(RunInterrupted) as stopped:
        train(config, on_step=preempt)
    return Path(stopped.value.run_dir)


def groups_in_play(checkpoint, group_size: int) -> list[int]:
    """An asynchronous run's checkpoint: the groups it holds trajectories of, after checking
    that each group still in play has all its members there (none lost)."""
    groups = sorted(r["group_id"] for r in checkpoint.state["cache"])
    in_play = checkpoint.state["rollout_counts"]["async"]["start_versions"]
    assert groups == sorted(group_size * [int(g) for g in in_play]), "a member was lost"
    return groups


def assert_same_weights_and_cache(ours, theirs) -> None:
    """Two checkpoints' weights and cached trajectories, bit for bit."""
    import torch

    for group in ("model", "cache"):
        for name, tensor in theirs.tensors[group].items():
            assert torch.equal(ours.tensors[group][name], tensor), f"{group}.{name}"
    assert ours.state["cache"] == theirs.state["cache"]
