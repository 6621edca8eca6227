"""The typed config: defaults, the shipped example files, and every error at once."""

from pathlib import Path

import pytest

from rollverify.config import ConfigError, RunConfig, load_config
from rollverify.training.cost_settings import pricing_layout

EXPERIMENTS = Path(__file__).parents[1] / "experiments"  # the repository's top level


def test_default_yaml_is_exactly_the_defaults():
    assert load_config(EXPERIMENTS / "default.yaml") == load_config() == RunConfig()


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads_and_opens_with_its_command(path):
    load_config(path)
    assert path.read_text().startswith("# rvctl ")


def test_all_problems_are_reported_at_once(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "train:\n  stesp: 3\n  learning_rate: -1\nrollout:\n  engine: vlm\n"
        "verify:\n  ds: 0\n  dt: inf\n"
    )
    with pytest.raises(ConfigError) as error:
        load_config(bad)
    assert error.value.problems == [
        "rollout.engine: must be one of auto, hf, vllm, got 'vlm'; did you mean 'vllm'?",
        "verify.ds: must be > 0 (inf allowed) or auto, got 0.0",
        "train.stesp: unknown key; did you mean train.steps?",
        "train.learning_rate: must be > 0, got -1.0",
    ]


def test_inf_is_accepted_for_thresholds(tmp_path):
    path = tmp_path / "inf.yaml"
    path.write_text("verify:\n  ds: .inf\n  dt: inf\n")
    config = load_config(path)
    assert config.verify.ds == config.verify.dt == float("inf")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("train: [1, 2]", "train: must be a mapping, got list"),
        ("train:\n  steps: 2.5", "train.steps: must be an integer, got 2.5"),
        ("train:\n  steps: true", "train.steps: must be an integer, got True"),
        ("- a\n- b", "the top level must be a mapping"),
        ("train: {steps: 3", "malformed YAML at line 1"),
        ("model:\n  path: models/absent", "model.path: no model folder"),
        (
            "rollout:\n  max_new_tokens: 600",
            "vllm.max_model_len: must exceed rollout.max_new_tokens (600)",
        ),
        ("vllm:\n  engines: 3", "vllm.engines: rollout.slots (64) must split evenly over 3"),
        (
            "rollout:\n  batch_groups: 4\n  max_inflight_groups: 2",
            "rollout.max_inflight_groups: must be >= rollout.batch_groups (4), got 2",
        ),
        ("vllm:\n  node_resource: GPU", "vllm.node_resource: must be a custom resource's name"),
        ("vllm:\n  node_resource: 'a b'", "vllm.node_resource: must be a custom resource's"),
        ("vllm:\n  node_lost_wait_seconds: -1", "vllm.node_lost_wait_seconds: must be >= 0"),
        ("vllm:\n  node_lost: never", "vllm.node_lost: must be one of anywhere, stop"),
        (
            "vllm:\n  node_resource: engine_node",
            "vllm.node_resource: 'engine_node' marks nodes of a Ray cluster; give vllm.ray_address",
        ),
        (
            "rollout:\n  engine: hf\nvllm:\n  node_resource: gpu_node\n  ray_address: h:1",
            "vllm.node_resource: places vLLM engines; the hf engine runs in the trainer's",
        ),
    ],
)
def test_bad_files_name_the_field(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(
        ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        load_config(path)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="cannot read it"):
        load_config(tmp_path / "absent.yaml")


def test_the_cost_layout_follows_the_engine_unless_set():
    hf = load_config(overrides={"rollout.engine": "hf", "train.processes": 2})
    assert (pricing_layout(hf).kind, pricing_layout(hf).gpus) == ("colocated", 2)
    vllm = {"rollout.engine": "vllm", "vllm.engines": 4, "vllm.tensor_parallel_size": 2}
    vllm |= {"rollout.slots": 64, "train.processes": 4}
    assert pricing_layout(load_config(overrides=vllm)).gpus == 4 + 8
    colocated = load_config(overrides=vllm | {"cost.layout": "colocated"})
    assert pricing_layout(colocated).gpus == 8
    with pytest.raises(ConfigError, match="cost.gpu: must be one of a100, h100, h200, b200"):
        load_config(overrides={"cost.gpu": "v100"})
