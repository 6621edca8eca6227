"""train.async_checkpoint: periodic checkpoints written in a thread while training goes on.
Safe only if what the thread writes is a copy: a write slowed down to outlast the next step
must still hold exactly what a synchronous checkpoint of that step holds."""

from __future__ import annotations

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
    synchronous = Path(train(tiny(tmp_path / "sync", "rollverify", **SETTINGS)).run_dir)
    write, overlapped = checkpoint_files._write, []

    def slow_write(temporary, checkpoint):
        started = time.monotonic()
        time.sleep(1.5)  # longer than a tiny step: the next update runs meanwhile
        write(temporary, checkpoint)
        overlapped.append(time.monotonic() - started)

    monkeypatch.setattr(checkpoint_files, "_write", slow_write)
    config = tiny(tmp_path / "async", "rollverify", **SETTINGS, **{"train.async_checkpoint": True})
    background = Path(train(config).run_dir)
    assert len(overlapped) == 4  # steps 0 (before training), 1, 2 in the background; 3 at the end
    for step in (1, 2, 3):
        ours = load(folder_for(background / "checkpoints", step))
        theirs = load(folder_for(synchronous / "checkpoints", step))
        assert ours.tensors.keys() == theirs.tensors.keys()
        for group, tensors in theirs.tensors.items():
            for name, tensor in tensors.items():
                assert torch.equal(ours.tensors[group][name], tensor), (step, group, name)
        for part in ("optimizer", "cache", "task", "monitor", "scheduler"):
            assert ours.state[part] == theirs.state[part], (step, part)
