"""The shipped base model on the chain task: a long tail, and room for RL to improve."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollverify.config import load_config
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.chain import ChainProblem, ChainTaskConfig, chain_reward, sample_problems
from rollverify.tasks.evaluation import evaluate
from rollverify.training.parts import make_engine, make_task


@pytest.fixture(scope="module")
def base():
    config = load_config(overrides={"task.eval_size": 256, "rollout.engine": "hf"})
    tokenizer = AutoTokenizer.from_pretrained(config.model_path())
    model = AutoModelForCausalLM.from_pretrained(config.model_path())
    return config, tokenizer, model


def test_base_model_accuracy_is_between_20_and_60_percent(base):
    config, tokenizer, model = base
    task = make_task(config, tokenizer)
    accuracy = evaluate(
        make_engine(config, model, tokenizer),
        task,
        task.eval_problems(),
        samples=1,
        seed=config.task.eval_seed,
    )
    assert 0.2 <= accuracy <= 0.6


def test_base_model_response_lengths_have_a_long_tail(base):
    config, tokenizer, model = base
    engine = make_engine(config, model, tokenizer)
    task = make_task(config, tokenizer)
    problems = task.eval_problems()
    trajectories = [Trajectory(p.prompt_ids, i, 0) for i, p in enumerate(problems)]
    with engine.seeded(7):
        engine.submit(trajectories)
        while engine.has_work:
            engine.poll()
    lengths = torch.tensor([len(t) for t in trajectories], dtype=torch.float)
    assert torch.quantile(lengths, 0.99) / lengths.median() >= 4


def test_chain_task_format_and_reward():
    problem = ChainProblem(start=7, add=3, steps=4)
    assert problem.prompt == "Q:7+3x4="
    assert problem.solution() == "4;7+3=0:3;0+3=3:2;3+3=6:1;6+3=9:0#9"
    assert chain_reward(problem.solution(), "9") == 1.0
    assert chain_reward("4;7+3=0:3#0", "9") == 0.0
    assert chain_reward("no answer", "9") == 0.0
    lengths = sorted(len(p.solution()) for p in sample_problems(4000, 0, ChainTaskConfig()))
    assert lengths[int(0.99 * len(lengths))] / lengths[len(lengths) // 2] >= 4


def test_build_info_records_how_the_shipped_model_was_made(base):
    config, *_ = base
    info = json.loads((Path(config.model_path()) / "build_info.json").read_text())
    assert info["build"]["noise"] > 0 and 0.2 <= info["sampled_accuracy"] <= 0.6
