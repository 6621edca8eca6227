"""Checkpoint folders: whole or absent, checksummed, safetensors + JSON only, last K kept."""

import json

import pytest
import torch

from rollverify.training.checkpoint.files import Checkpoint, check, folder_for, latest, save


def checkpoint(step: int) -> Checkpoint:
    torch.manual_seed(step)
    return Checkpoint(
        step,
        {"model": {"w": torch.randn(4, 3)}, "rng": {"torch": torch.get_rng_state()}},
        {"data_position": step * 8, "mlflow_run_id": "abc"},
    )


def test_round_trip_and_only_safetensors_and_json(tmp_path):
    save(tmp_path, checkpoint(5))
    loaded = latest(tmp_path)
    assert loaded.step == 5 and loaded.state == {"data_position": 40, "mlflow_run_id": "abc"}
    torch.testing.assert_close(loaded.tensors["model"]["w"], checkpoint(5).tensors["model"]["w"])
    names = {p.name for p in folder_for(tmp_path, 5).iterdir()}
    assert names == {"model.safetensors", "rng.safetensors", "state.json", "manifest.json"}


def test_only_the_newest_k_are_kept(tmp_path):
    for step in range(1, 6):
        save(tmp_path, checkpoint(step), keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000004", "step-000005"]


@pytest.mark.parametrize(
    "damage", ["truncate", "flip", "delete", "manifest", "manifest-list", "manifest-no-files"]
)
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_good_one(tmp_path, damage):
    save(tmp_path, checkpoint(1))
    newest = save(tmp_path, checkpoint(2))
    target = newest / "model.safetensors"
    if damage == "truncate":
        target.write_bytes(target.read_bytes()[:-7])
    elif damage == "flip":
        data = bytearray(target.read_bytes())
        data[-1] ^= 0xFF
        target.write_bytes(bytes(data))
    elif damage == "delete":
        target.unlink()
    elif damage == "manifest-list":
        (newest / "manifest.json").write_text("[1, 2]")
    elif damage == "manifest-no-files":
        (newest / "manifest.json").write_text('{"format": "rollverify.checkpoint/1"}')
    else:
        (newest / "manifest.json").write_text("{not json")
    assert check(newest) is not None
    with pytest.warns(UserWarning, match="skipping checkpoint"):
        assert latest(tmp_path).step == 1


def test_an_interrupted_write_leaves_no_checkpoint_behind(tmp_path):
    save(tmp_path, checkpoint(1))
    half = tmp_path / ".tmp-step-000002-123"  # what a kill during save leaves
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"partial")
    assert latest(tmp_path).step == 1
    save(tmp_path, checkpoint(2))
    assert not half.exists()
    assert json.loads((folder_for(tmp_path, 2) / "manifest.json").read_text())["step"] == 2


def test_a_save_killed_while_replacing_its_step_puts_the_older_copy_back(tmp_path):
    """Saving a step again (a stop right after a periodic save) moves the older copy aside
    before renaming the new one in; a kill between the two must not lose the step."""
    save(tmp_path, checkpoint(1))
    save(tmp_path, checkpoint(2)).rename(tmp_path / ".tmp-old-step-000002-123")
    assert latest(tmp_path).step == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000001", "step-000002"]


def test_tied_weights_are_stored_once_and_come_back_tied_in_name(tmp_path):
    shared = torch.randn(5, 3)
    save(tmp_path, Checkpoint(1, {"model": {"embed": shared, "head": shared}}, {}))
    loaded = latest(tmp_path).tensors["model"]
    assert torch.equal(loaded["embed"], shared) and torch.equal(loaded["head"], shared)
    from safetensors import safe_open

    with safe_open(str(folder_for(tmp_path, 1) / "model.safetensors"), "pt") as file:
        assert list(file.keys()) == ["embed"]
