"""The config from the command line: `--set key=value` on the run commands, `rvctl config
show`, and `rvctl train --dry-run` (checks and a memory estimate, nothing started)."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from rollverify.config import ConfigError, RunConfig, load_config, parse_settings, with_overrides
from rollverify.config.tiny_defaults import TINY_DEFAULTS, TinyDefaultWarning
from rollverify.core.methods import METHODS
from rollverify.cost.costmodel.gpus import GPUS, Efficiency
from rollverify.cost.costmodel.roofline import decode_step_seconds, forward_flops
from rollverify.infra.nested_dicts import config_fields
from rollverify.training.checkpoint.files import latest
from rollverify.training.cost_settings import memory_estimate, model_shape
from rollverify.training.run import train
from rollverify.training.trl_adapter import grpo_config
from tests.cli import run_rvctl
from tests.runs import tiny, tiny_file
from tests.test_cli import rvctl

EIGHT_B = "experiments/qwen3-8b-dapo-math.yaml"
MOE = "experiments/qwen3-30b-a3b-dapo-math.yaml"


def test_set_reads_yaml_values_and_null_sets_a_field_to_null():
    settings = parse_settings(
        ["train.learning_rate=1e-6", "train.micro_batch_size=null", "task.eval_sets.short=4"]
    )
    config = load_config(EIGHT_B, settings)
    assert config.train.learning_rate == 1e-6
    assert config.train.micro_batch_size is None  # the file says 2: null is a value
    assert config.task.eval_sets == {"short": 4}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("train.learning_rate", "--set train.learning_rate: expected key=value"),
        ("=3", "--set =3: expected key=value"),
        ("train..steps=3", "--set train..steps=3: expected key=value"),
        ("train.steps=[1,", "--set train.steps=[1,: the value is not valid YAML"),
    ],
)
def test_a_malformed_set_item_is_named(item, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        parse_settings([item])


def test_set_on_the_command_line_is_checked_and_named_options_win(tmp_path):
    shown = rvctl("config", "show", "--set", "train.lerning_rate=1")
    assert shown.returncode == 2 and "Traceback" not in shown.stderr
    assert shown.stderr.strip() == (
        "error: train.lerning_rate: unknown key; did you mean train.learning_rate?"
    )
    shown = rvctl("config", "show", "--set", "train.steps=0")
    assert shown.stderr.strip() == "error: train.steps: must be >= 1, got 0"
    dry = rvctl(
        "train",
        "--dry-run",
        "--format",
        "json",
        "--output",
        str(tmp_path),
        "--set",
        "train.steps=7",
        "--steps",
        "9",
        "--set",
        "train.seed=5",
    )
    assert dry.returncode == 0, dry.stderr
    assert not any(tmp_path.iterdir())  # nothing written


def test_config_show_prints_the_resolved_config_a_run_would_use(tmp_path):
    path = tiny_file(tmp_path / "c.yaml")
    shown = rvctl("config", "show", "-c", str(path), "--set", "verify.dt=3")
    assert shown.returncode == 0, shown.stderr
    written = tmp_path / "resolved.yaml"
    written.write_text(shown.stdout)
    expected = load_config(path, {"verify.dt": 3.0}).to_dict()
    assert load_config(written).to_dict() == expected  # a file to start from, as it is
    as_json = json.loads(rvctl("config", "show", "-c", str(path), "-f", "json").stdout)
    assert as_json == load_config(path).to_dict()
    table = rvctl("config", "show", "-c", str(path), "-f", "table").stdout
    assert any("rollout.slots" in line and "changed" in line for line in table.splitlines())
    assert any("verify.ds" in line and "changed" not in line for line in table.splitlines())
    as_grpo = json.loads(rvctl("config", "show", "-c", str(path), "--method", "grpo",
                               "-f", "json").stdout)  # fmt: skip
    assert as_grpo == load_config(path, {"train.method": "grpo"}).to_dict()


@pytest.mark.parametrize("recipe", [EIGHT_B, MOE])
def test_dry_run_of_the_gpu_configs_here_names_every_problem_and_starts_nothing(tmp_path, recipe):
    result = rvctl("train", "--dry-run", "-c", recipe, "--output", str(tmp_path / "runs"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert any(line.startswith("error: task.train_file: no file dapo-math-17k") for line in errors)
    assert any("train.sharding: fsdp needs GPUs" in line for line in errors)
    assert not (tmp_path / "runs").exists()
    assert "checkpoint" in result.stdout and "activations" in result.stdout


def test_the_memory_estimate_sees_what_the_8b_config_needs():
    config = load_config(EIGHT_B)
    memory = memory_estimate(config)
    parts = memory.trainer_parts
    params = parts["weights"] * config.train.processes / 4  # fp32 masters, 4 shards
    assert 8.0e9 < params < 8.4e9  # Qwen3-8B: 8.19B
    assert memory.problems() == []  # the config fits an H100 as written
    # Without gradient checkpointing, 2 x 9K-token sequences per pass would not.
    unchecked = memory_estimate(with_overrides(config, {"train.gradient_checkpointing": False}))
    assert unchecked.trainer_parts["activations"] > 8 * parts["activations"]
    assert any("train.gradient_checkpointing" in p for p in unchecked.problems())
    pure = memory_estimate(with_overrides(config, {"train.precision": "pure"}))
    assert pure.checkpoint_bytes == memory.checkpoint_bytes / 2  # bf16 instead of fp32


def test_the_moe_recipe_is_priced_from_its_active_parameters_and_fits_its_gpus():
    """Qwen3-30B-A3B-Base: 30.5B parameters held (weights, AdamW state, KV and sync), 3.3B a
    token uses (FLOPs); its layout fits H100s as written."""
    config = load_config(MOE)
    shape = model_shape(config)
    assert 30.4e9 < shape.parameters < 30.6e9 and 3.3e9 < shape.active_parameters < 3.4e9
    memory = memory_estimate(config)
    assert memory.problems() == []
    params = memory.trainer_parts["weights"] * config.train.processes / 4  # fp32 masters
    assert params == pytest.approx(shape.parameters)
    dense = replace(shape, active_parameters=shape.parameters)  # all 128 experts at once
    assert forward_flops(shape, 1000, 0) == 2 * shape.active_parameters * 1000
    assert forward_flops(shape, 1000, 0) < forward_flops(dense, 1000, 0) / 9
    # a decoding iteration reads every expert's weights (docs/cost-model.md: what it does not
    # know of MoE), so one row costs what it would if every expert were active
    h100, efficiency = GPUS["h100"], Efficiency()
    one_row = decode_step_seconds(shape, h100, efficiency, rows=1, context=2000)
    assert one_row == decode_step_seconds(dense, h100, efficiency, rows=1, context=2000)


def test_trl_gets_gradient_checkpointing_and_weight_decay(tmp_path):
    config = tiny(
        tmp_path, "grpo", **{"train.gradient_checkpointing": True, "train.weight_decay": 0.1}
    )
    args = grpo_config(config, METHODS["grpo"], str(tmp_path / "trl"))
    assert args.gradient_checkpointing and args.weight_decay == 0.1
    sharded = with_overrides(config, {"train.sharding": "fsdp"})
    args = grpo_config(sharded, METHODS["grpo"], str(tmp_path / "trl"))
    assert not args.gradient_checkpointing  # FSDP's own, where transformers wants it
    assert args.fsdp_config["activation_checkpointing"] is True
    assert yaml.safe_dump(config.to_dict())  # plain data


@pytest.mark.slow  # two 2-step runs, ~8 s
def test_gradient_checkpointing_trains_the_same_weights(tmp_path):
    def weights(**overrides):
        summary = train(
            tiny(tmp_path / str(len(overrides)), "grpo", **{"train.steps": 2}, **overrides)
        )
        return latest(Path(summary.run_dir) / "checkpoints").tensors["model"]

    import torch
    from transformers import AutoModelForCausalLM

    plain, recomputed = weights(), weights(**{"train.gradient_checkpointing": True})
    for name, tensor in plain.items():
        torch.testing.assert_close(recomputed[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    base = AutoModelForCausalLM.from_pretrained(tiny(tmp_path, "grpo").model_path()).state_dict()
    assert max((plain[n] - base[n]).abs().max().item() for n in plain) > 1e-4  # it trained


def test_a_large_model_config_is_warned_of_each_tiny_default_it_leaves(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("model:\n  path: Qwen/Qwen3-8B-Base\n  dtype: bfloat16\n")
    with pytest.warns(TinyDefaultWarning) as caught:
        load_config(path)
    warned = {str(w.message).split(":")[0] for w in caught}
    assert warned == set(TINY_DEFAULTS) - {"model.dtype"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", TinyDefaultWarning)
        load_config(EIGHT_B)  # spells them all out
        load_config()  # the tiny model itself
    shown = rvctl("config", "show", "-c", str(path))
    assert shown.returncode == 0
    assert "warning: train.learning_rate: 0.0005 is the tiny model's default, for a 8.2B model" in (
        shown.stderr
    )


def test_config_explain_prints_each_fields_doc_type_default_and_rule(monkeypatch, capsys):
    one = run_rvctl(["config", "explain", "verify.ds"], monkeypatch, capsys)
    assert one.returncode == 0, one.stderr
    first, *doc = one.stdout.splitlines()
    assert first == "verify.ds: float or auto, default 0.01; > 0 (inf allowed) or auto"
    assert " ".join(line.strip() for line in doc).startswith("Sequence-stage threshold")
    every = run_rvctl(["config", "explain", "-f", "json"], monkeypatch, capsys)
    rows = json.loads(every.stdout)
    assert [r["field"] for r in rows] == list(config_fields(RunConfig().to_dict()))
    assert all(r["doc"] for r in rows), [r["field"] for r in rows if not r["doc"]]
    method = next(r for r in rows if r["field"] == "rollout.engine")
    assert method["type"] == "choice" and method["allowed"] == "auto, hf, vllm"
    wrong = run_rvctl(["config", "explain", "verify.dss"], monkeypatch, capsys)
    assert wrong.returncode == 2 and "did you mean verify.ds?" in wrong.stderr
