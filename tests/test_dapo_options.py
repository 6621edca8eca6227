"""DAPO's options as TRL has them: the soft overlong punishment (rollout.overlong_buffer, TRL's
get_soft_overlong_punishment), overlong filtering (train.mask_truncated, TRL's
mask_truncated_completions); and prompts longer than task.max_prompt_tokens skipped."""

from __future__ import annotations

import json

import pytest

from rollverify.config import load_config
from rollverify.methods import METHODS
from rollverify.tasks.math_task import MathTask
from rollverify.training.run import train
from rollverify.training.trl_adapter import grpo_config
from tests.runs import history, tiny
from tests.test_math_task import char_tokenizer


@pytest.mark.slow  # two 1-step runs, ~8 s
def test_the_overlong_punishment_lowers_the_reward_of_long_responses(tmp_path):
    def first_step(**overrides) -> dict:
        config = tiny(tmp_path / str(len(overrides)), "grpo", **{"train.steps": 1}, **overrides)
        return {name: values[1] for name, values in history(train(config)).items() if 1 in values}

    plain = first_step()
    # max_new_tokens 64, buffer 60: every response over 4 tokens loses (length - 4) / 60.
    shaped = first_step(**{"rollout.overlong_buffer": 60})
    assert shaped["tokens_generated"] == plain["tokens_generated"]  # the same samples
    length = plain["response_length_mean"]
    assert shaped["reward_mean"] < plain["reward_mean"]
    assert shaped["reward_mean"] == pytest.approx(
        plain["reward_mean"] - (length - 4) / 60, abs=0.05
    )


def test_an_overlong_buffer_must_leave_room_and_masking_reaches_trl(tmp_path):
    with pytest.raises(ValueError, match="rollout.overlong_buffer: must be below"):
        tiny(tmp_path, "grpo", **{"rollout.overlong_buffer": 64})
    config = tiny(tmp_path, "grpo", **{"train.mask_truncated": True})
    assert grpo_config(config, METHODS["grpo"], str(tmp_path)).mask_truncated_completions


def test_prompts_over_max_prompt_tokens_are_skipped_and_counted(tmp_path):
    records = [{"problem": "1+1?" * (30 if i % 3 == 0 else 1), "answer": "2"} for i in range(9)]
    data = tmp_path / "train.json"
    data.write_text(json.dumps(records))

    def task_of(path) -> MathTask:
        return MathTask(
            char_tokenizer(),
            str(path),
            str(path),
            seed=0,
            eval_size=9,
            eval_seed=0,
            max_prompt_tokens=200,
        )

    task = task_of(data)
    with pytest.warns(UserWarning, match="skipping training prompts longer than 200 tokens"):
        groups = [task.next_group() for _ in range(6)]  # as many as the short ones
    assert all(len(g.prompt_ids) <= 200 for g in groups)
    assert [g.group_id for g in groups] == list(range(6))
    assert task.skipped == task.next_problem - 6 >= 1  # drawn, less the groups made
    again = task_of(data)
    again.load_state_dict(task.state_dict())
    assert again.next_group().prompt_ids.tolist() == task.next_group().prompt_ids.tolist()
    with pytest.warns(UserWarning, match="skips 3 of 9 prompts longer than 200"):
        assert len(task.eval_problems()) == 6


def test_the_prompt_limit_defaults_to_what_the_engine_context_leaves():
    config = load_config("experiments/qwen3-8b-dapo-math.yaml")
    assert config.max_prompt_tokens() == 9216 - 8192


def test_resume_refuses_a_context_change_that_would_change_the_prompts_kept():
    from rollverify.training.run_state import config_changes

    saved = load_config("experiments/qwen3-8b-dapo-math.yaml").to_dict()
    wider = load_config("experiments/qwen3-8b-dapo-math.yaml", {"vllm.max_model_len": 12288})
    assert any(
        "set task.max_prompt_tokens: 1024" in p for p in config_changes(saved, wider.to_dict())
    )
    fixed = wider.with_overrides({"task.max_prompt_tokens": 1024})
    pinned = load_config("experiments/qwen3-8b-dapo-math.yaml", {"task.max_prompt_tokens": 1024})
    assert config_changes(pinned.to_dict(), fixed.to_dict()) == []
    how = load_config(
        "experiments/qwen3-8b-dapo-math.yaml",
        {"train.stop_grace_seconds": 150.0, "train.gradient_checkpointing": False},
    )
    assert config_changes(saved, how.to_dict()) == []  # how it runs, not what it trains
