"""DAPO's options, as TRL has them where it does: the soft overlong punishment
(rollout.overlong_buffer, TRL's get_soft_overlong_punishment), overlong filtering
(train.mask_truncated, TRL's mask_truncated_completions), dynamic sampling (ours: TRL has
none); truncated sampling; and prompts longer than task.max_prompt_tokens skipped."""

from __future__ import annotations

import json

import pytest

from rollverify.config import load_config, with_overrides
from rollverify.core.methods import METHODS
from rollverify.tasks.math_task import MathTask, ProblemFiles
from rollverify.training.parts import make_engine
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


@pytest.mark.slow  # a 2-step run, ~3 s
def test_dynamic_sampling_trains_no_group_of_tied_rewards(tmp_path):
    # The tiny run without it: half its groups tie at step 1 and 2 (trl/frac_reward_zero_std).
    config = tiny(
        tmp_path, "rollverify", **{"train.steps": 2, "rollout.dynamic_sampling_max_drops": 50}
    )
    metrics = history(train(config))
    assert metrics["trl/frac_reward_zero_std"] == {1: 0.0, 2: 0.0}  # TRL's own count
    dropped = metrics["groups_dropped"]
    assert sum(dropped.values()) >= 2
    assert all(metrics["tokens_discarded"][s] > 0 for s, n in dropped.items() if n)


def test_an_overlong_buffer_must_leave_room_and_masking_reaches_trl(tmp_path):
    with pytest.raises(ValueError, match="rollout.overlong_buffer: must be below"):
        tiny(tmp_path, "grpo", **{"rollout.overlong_buffer": 64})
    config = tiny(tmp_path, "grpo", **{"train.mask_truncated": True})
    assert grpo_config(config, METHODS["grpo"], str(tmp_path)).mask_truncated_completions


def test_truncated_sampling_on_vllm_needs_temperature_1_and_reaches_trl(tmp_path):
    with pytest.raises(ValueError, match="rollout.top_p: truncated sampling on the vllm engine"):
        tiny(
            tmp_path,
            "grpo",
            **{"rollout.engine": "vllm", "rollout.top_p": 0.9, "rollout.temperature": 0.7},
        )
    config = tiny(tmp_path, "grpo", **{"rollout.top_k": 5, "rollout.temperature": 0.7})
    arguments = grpo_config(config, METHODS["grpo"], str(tmp_path))
    assert (arguments.top_k, arguments.top_p) == (5, 1.0)
    assert make_engine(config).top_k == 5  # (the engines' truncation: test_hf_engine.py)


def test_prompts_over_max_prompt_tokens_are_skipped_and_counted(tmp_path):
    records = [{"problem": "1+1?" * (30 if i % 3 == 0 else 1), "answer": "2"} for i in range(9)]
    data = tmp_path / "train.json"
    data.write_text(json.dumps(records))

    def task_of(path) -> MathTask:
        files = ProblemFiles(
            str(path), str(path), seed=0, eval_size=9, eval_seed=0, max_prompt_tokens=200
        )
        return MathTask(char_tokenizer(), files)

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
    from rollverify.training.checkpoint.run_state import config_changes

    saved = load_config("experiments/qwen3-8b-dapo-math.yaml").to_dict()
    wider = load_config("experiments/qwen3-8b-dapo-math.yaml", {"vllm.max_model_len": 12288})
    assert any(
        "set task.max_prompt_tokens: 1024" in p for p in config_changes(saved, wider.to_dict())
    )
    fixed = with_overrides(wider, {"task.max_prompt_tokens": 1024})
    pinned = load_config("experiments/qwen3-8b-dapo-math.yaml", {"task.max_prompt_tokens": 1024})
    assert config_changes(pinned.to_dict(), fixed.to_dict()) == []
    how = load_config(
        "experiments/qwen3-8b-dapo-math.yaml",
        {"train.stop_grace_seconds": 150.0, "train.gradient_checkpointing": False},
    )
    assert config_changes(saved, how.to_dict()) == []  # how it runs, not what it trains
