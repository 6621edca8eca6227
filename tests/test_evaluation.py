"""The paper's evaluation: per eval set avg@k and pass@k, their mean as eval_accuracy, all
sets sampled through the engine at once; logged per set and shown by the report."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollverify.config import load_config, with_overrides
from rollverify.experiments.report import method_rows
from rollverify.rollout.engines.hf_engine import HFEngine
from rollverify.tasks.chain import ChainTask, ChainTaskConfig
from rollverify.tasks.evaluation import evaluate_sets
from rollverify.tracking import metric_names as metrics
from rollverify.tracking.run_records import load_report
from rollverify.training.run import train
from tests.runs import history, tiny

SETS = {"short": 2, "long": 32}  # chains of at most 2 steps, and of up to 32


@pytest.fixture(scope="module")
def parts():
    config = load_config()
    tokenizer = AutoTokenizer.from_pretrained(config.model_path())
    model = AutoModelForCausalLM.from_pretrained(config.model_path())
    return tokenizer, model


def test_avg_and_pass_at_k_per_set_with_every_sample_in_one_batch(parts):
    tokenizer, model = parts
    task = ChainTask(
        tokenizer, ChainTaskConfig(), seed=0, eval_size=12, eval_seed=1, eval_sets=SETS
    )
    sets = task.eval_sets()
    assert list(sets) == ["short", "long"] and all(len(p) == 12 for p in sets.values())
    sets["short"] = sets["short"][:6]  # sets of unequal size: each still weighs the same
    slots = 16
    engine = HFEngine(model, slots, max_new_tokens=200, eos_token_id=1, pad_token_id=0)
    scores = []
    original = task.reward_tokens
    task.reward_tokens = lambda ids, answer: scores.append(original(ids, answer)) or scores[-1]
    evaluation = evaluate_sets(engine, task, sets, samples=3, seed=7)
    # (6 + 12) problems x 3 samples = 54 trajectories: the engine's 16 slots start full.
    assert max(step.decode_rows for step in engine.take_trace()) == slots
    # submitted set by set, problem by problem, sample by sample
    rewards = dict(zip(SETS, torch.tensor(scores).split([18, 36]), strict=True))
    for name, size in [("short", 6), ("long", 12)]:
        score, per_problem = evaluation.sets[name], rewards[name].view(size, 3)
        assert score.problems == size
        assert score.avg_at_k == pytest.approx(per_problem.mean().item())
        passed = (per_problem.amax(-1) >= 1).float().mean().item()
        assert score.pass_at_k == pytest.approx(passed)
    means = [rewards[name].mean().item() for name in SETS]
    assert evaluation.accuracy == pytest.approx(sum(means) / 2)
    # The short set is easier for the base model: the sets differ in difficulty.
    assert evaluation.sets["short"].avg_at_k > evaluation.sets["long"].avg_at_k


def test_a_run_logs_every_set_and_their_mean_and_the_report_shows_them(tmp_path):
    config = tiny(
        tmp_path,
        "grpo",
        **{"task.eval_sets": SETS, "task.eval_samples": 2, "train.steps": 2},
    )
    summary = train(config)
    metrics_by_name = history(summary)
    assert metrics.unknown(metrics_by_name) == []
    for step in (0, 2):  # the base model, and the end
        per_set = [metrics_by_name[metrics.eval_avg_at_k(name)][step] for name in SETS]
        assert metrics_by_name["eval_accuracy"][step] == pytest.approx(sum(per_set) / 2)
        for name in SETS:
            avg = metrics_by_name[metrics.eval_avg_at_k(name)][step]
            assert avg <= metrics_by_name[metrics.eval_pass_at_k(name)][step]  # rewards 0/1
    (row,) = method_rows(load_report([summary.run_id], summary.tracking_uri).runs)
    for name in SETS:
        assert row[f"{name}_avg_at_k"] == pytest.approx(
            metrics_by_name[metrics.eval_avg_at_k(name)][2]
        )
        assert row[f"{name}_pass_at_k"] is not None


def test_eval_sets_travel_whole_through_overrides_sweeps_and_resume_checks():
    from rollverify.config import ConfigError
    from rollverify.infra.nested_dicts import config_fields
    from rollverify.training.checkpoint.run_state import config_changes

    config = load_config(overrides={"task.eval_sets": SETS})
    assert with_overrides(config, {"train.steps": 2}).task.eval_sets == SETS
    assert load_config(overrides=config_fields(config.to_dict())) == config  # a sweep's trial
    # Adding or changing a set changes what eval_accuracy means: a resumed run refuses it.
    (problem,) = config_changes(load_config().to_dict(), config.to_dict())
    assert problem.startswith("task.eval_sets: {} in the checkpoint, {'short': 2, 'long': 32} now")
    for bad in ({"none": 0}, {"a/b": 3}):
        with pytest.raises(ConfigError, match="task.eval_sets: must be a mapping of set names"):
            load_config(overrides={"task.eval_sets": bad})
