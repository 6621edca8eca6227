"""Pass-through options: train.trl_args reach TRL's GRPOConfig and vllm.engine_args each
sidecar's engine arguments; an unknown name is refused at load with the nearest valid one, and a
name rvctl sets itself with the rvctl field to use instead (config/passthrough.py)."""

from __future__ import annotations

import importlib.util

import pytest

from rollverify.config import ConfigError, load_config
from rollverify.config.passthrough import TRL_DEFAULTS, TRL_OWNED, VLLM_DEFAULTS, VLLM_OWNED
from rollverify.core.methods import METHODS
from rollverify.training.parts import vllm_settings
from rollverify.training.run import train
from rollverify.training.trl_adapter import grpo_arguments, grpo_config
from tests.cli import run_rvctl
from tests.runs import history, tiny

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vLLM is not installed: make setup"
)


def problems(**overrides) -> list[str]:
    with pytest.raises(ConfigError) as error:
        load_config(overrides=overrides)
    return error.value.problems


def test_a_trl_argument_reaches_the_trainer(tmp_path):
    """cosine decays the learning rate over the run; rvctl's own schedule holds it constant."""
    settings = {"train.steps": 3, "train.trl_args": {"lr_scheduler_type": "cosine"}}
    config = tiny(tmp_path / "cosine", "grpo", **settings)
    assert grpo_config(config, METHODS["grpo"], str(tmp_path)).lr_scheduler_type == "cosine"
    rates = history(train(config))["trl/learning_rate"]
    assert rates[1] > rates[2] > rates[3]


def test_unknown_and_owned_trl_arguments_are_refused_at_load(tmp_path, monkeypatch, capsys):
    command = ["train", "--set", "train.trl_args.no_such_arg=1", "--output", str(tmp_path)]
    result = run_rvctl(command, monkeypatch, capsys)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "train.trl_args.no_such_arg: no such argument" in result.stderr
    assert not list(tmp_path.iterdir()), "nothing started"
    assert problems(**{"train.trl_args": {"lr_schedular_type": "cosine"}}) == [
        "train.trl_args.lr_schedular_type: no such argument; did you mean lr_scheduler_type?"
    ]
    assert problems(**{"train.trl_args": {"learning_rate": 1e-3}}) == [
        "train.trl_args.learning_rate: rvctl decides learning_rate itself; set "
        "train.learning_rate instead"
    ]


def test_every_argument_rvctl_gives_trl_is_named_with_its_field_or_may_be_changed(tmp_path):
    for name, method in METHODS.items():
        config = load_config(overrides={"train.method": name})
        given = set(grpo_arguments(config, method, str(tmp_path)))
        assert given <= set(TRL_OWNED) | TRL_DEFAULTS, name


@needs_vllm
def test_vllm_engine_arguments_are_checked_and_reach_every_sidecar():
    config = load_config(overrides={"vllm.engine_args": {"enable_prefix_caching": False}})
    kwargs = vllm_settings(config).engine_kwargs(seed=0)
    assert kwargs["enable_prefix_caching"] is False
    assert set(kwargs) <= set(VLLM_OWNED) | VLLM_DEFAULTS
    assert problems(**{"vllm.engine_args": {"enable_prefix_cachng": False}}) == [
        "vllm.engine_args.enable_prefix_cachng: no such argument; did you mean "
        "enable_prefix_caching?"
    ]
    assert problems(**{"vllm.engine_args": {"max_model_len": 4096}}) == [
        "vllm.engine_args.max_model_len: rvctl decides max_model_len itself; set "
        "vllm.max_model_len instead"
    ]
