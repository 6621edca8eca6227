"""`rvctl export`: a checkpoint becomes a model folder transformers loads with the trained
weights, the base model's config and tokenizer; bad input is one line, nothing written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollverify.training.checkpoint.export import export as export_model
from rollverify.training.checkpoint.files import folder_for, load_group
from rollverify.training.run import train
from tests.cli import run_rvctl
from tests.runs import tiny

pytestmark = pytest.mark.slow  # a training run; the CLI started twice, the rest in-process


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    summary = train(tiny(root, "grpo", **{"train.steps": 2, "train.checkpoint_every": 1}))
    return Path(summary.run_dir)


def export(monkeypatch, capsys, *args: str) -> subprocess.CompletedProcess:
    """`rvctl export ARGS`, in this process (tests/cli.py)."""
    return run_rvctl(["export", *args], monkeypatch, capsys)


def test_the_exported_folder_loads_with_the_checkpoints_weights(run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "policy"
    result = export(monkeypatch, capsys, str(run), "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    weights = load_group(folder_for(run / "checkpoints", 2) / "model.safetensors")
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    loaded = model.state_dict()
    assert loaded.keys() == weights.keys()
    assert all(torch.equal(loaded[name], weights[name]) for name in weights)
    base = AutoModelForCausalLM.from_pretrained(tiny(tmp_path, "grpo").model_path())
    assert not torch.equal(base.state_dict()["model.norm.weight"], loaded["model.norm.weight"])
    tokenizer = AutoTokenizer.from_pretrained(out)
    base_tokenizer = AutoTokenizer.from_pretrained(tiny(tmp_path, "grpo").model_path())
    assert tokenizer("3;+4").input_ids == base_tokenizer("3;+4").input_ids
    assert not list(tmp_path.glob(".policy.export-tmp"))


def test_a_step_picks_that_checkpoint(run, tmp_path):
    export_model(run, tmp_path / "step1", step=1)
    weights = load_group(folder_for(run / "checkpoints", 1) / "model.safetensors")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "step1").state_dict()
    assert all(torch.equal(loaded[name], weights[name]) for name in weights)


def test_bad_input_is_one_line_and_writes_nothing(run, tmp_path, monkeypatch, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "note.txt").write_text("keep me")
    result = export(monkeypatch, capsys, str(run), "--out", str(taken))  # the CLI's one line
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --out"), lines
    cases = [
        ((run, tmp_path / "x", 7), "--step 7: "),
        ((tmp_path, tmp_path / "y", None), "RUN_DIR"),
    ]
    for (run_dir, out, step), field in cases:
        with pytest.raises(ValueError) as refused:
            export_model(run_dir, out, step)
        assert str(refused.value).startswith(field) and "\n" not in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    assert (taken / "note.txt").read_text() == "keep me"


def test_a_damaged_model_file_falls_back_to_the_last_whole_checkpoint(run, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    damaged = folder_for(copy / "checkpoints", 2) / "model.safetensors"
    damaged.write_bytes(damaged.read_bytes()[:-10])
    assert export_model(copy, tmp_path / "policy").name == "step-000001"
    with pytest.raises(ValueError, match="checksum"):
        export_model(copy, tmp_path / "other", step=2)
