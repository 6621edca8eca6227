"""Every engine has everything the RolloutEngine protocol lists (what callers use), so no
caller needs getattr: the hf, simulated and vLLM engines, built but not started."""

from __future__ import annotations

import inspect

import pytest
from transformers import AutoModelForCausalLM

from rollverify.config import load_config
from rollverify.cost.costmodel import GPUS, Layout, ModelShape, Pricing
from rollverify.rollout.engines.hf_engine import HFEngine
from rollverify.rollout.engines.protocol import RolloutEngine
from rollverify.rollout.engines.simulated import SimulatedEngine
from rollverify.training.parts import vllm_settings


def protocol_members() -> set[str]:
    members = set(RolloutEngine.__annotations__)
    members |= {
        name
        for name, value in vars(RolloutEngine).items()
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))
    }
    return members


def engines():
    config = load_config()
    model = AutoModelForCausalLM.from_pretrained(config.model_path())
    yield "hf", HFEngine(model, slots=4, max_new_tokens=8, eos_token_id=1, pad_token_id=0)
    pricing = Pricing(ModelShape.of(config.model_path()), GPUS["h100"], Layout("colocated", 1))
    yield "simulated", SimulatedEngine(pricing, slots=4, max_new_tokens=8, lengths=lambda g, i: 4)
    from rollverify.rollout.engines.vllm_engine import VLLMEngine

    yield "vllm", VLLMEngine(vllm_settings(config), max_new_tokens=8, temperature=1.0)


def test_the_protocol_lists_what_callers_read():
    assert {"max_new_tokens", "temperature", "reset_stats", "slots", "version"} <= (
        protocol_members()
    )


@pytest.mark.parametrize(
    "name, engine", list(engines()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_each_engine_has_every_member_of_the_protocol(name, engine):
    missing = sorted(m for m in protocol_members() if not hasattr(engine, m))
    assert not missing, f"{name} engine lacks {missing}"
