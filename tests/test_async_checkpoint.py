"""train.async_checkpoint: periodic checkpoints written in a thread while training goes on.
Safe only if what the thread writes is a copy: a write held back until the next step has
trained must still hold exactly what a synchronous checkpoint of that step holds."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from rollverify.training.checkpoint import files as checkpoint_files
from rollverify.training.checkpoint.files import folder_for, load
from rollverify.training.run import train
from tests.runs import tiny

SETTINGS = {"train.checkpoint_every": 1, "train.keep_checkpoints": 5}


@pytest.mark.slow  # two 3-step runs, ~12 s
def test_a_background_checkpoint_holds_its_steps_state_while_training_moves_on(
    tmp_path, monkeypatch
):
    """Each background write waits until the next step has trained and been logged: that
    step ran while the write was in flight, and the write must still hold its own step."""
    synchronous = Path(train(tiny(tmp_path / "sync", "rollverify", **SETTINGS)).run_dir)
    write = checkpoint_files._write
    logged: dict[int, float] = {}  # step -> when it was logged
    next_logged = {step: threading.Event() for step in range(3)}  # k: step k + 1 was logged
    writes: dict[int, tuple[float, float]] = {}  # step -> (started, ended) of its write

    def log(step: int, metrics: dict) -> None:
        logged[step] = time.monotonic()
        if step - 1 in next_logged:
            next_logged[step - 1].set()

    def slow_write(temporary, checkpoint):
        started = time.monotonic()
        if threading.current_thread() is not threading.main_thread():  # in the background
            next_logged[checkpoint.step].wait(timeout=60)
        write(temporary, checkpoint)
        writes[checkpoint.step] = (started, time.monotonic())

    monkeypatch.setattr(checkpoint_files, "_write", slow_write)
    config = tiny(tmp_path / "async", "rollverify", **SETTINGS, **{"train.async_checkpoint": True})
    background = Path(train(config, on_step=log).run_dir)
    assert sorted(writes) == [0, 1, 2, 3]  # 0 (before training) and 3 (the last) by the run
    for step in (1, 2):  # training went on while these were written
        started, ended = writes[step]
        assert started < logged.get(step + 1, float("inf")) < ended, (step, writes, logged)
    for step in (1, 2, 3):
        ours = load(folder_for(background / "checkpoints", step))
        theirs = load(folder_for(synchronous / "checkpoints", step))
        assert ours.tensors.keys() == theirs.tensors.keys()
        for group, tensors in theirs.tensors.items():
            for name, tensor in tensors.items():
                assert torch.equal(ours.tensors[group][name], tensor), (step, group, name)
        for part in ("optimizer", "cache", "task", "monitor", "scheduler"):
            assert ours.state[part] == theirs.state[part], (step, part)
