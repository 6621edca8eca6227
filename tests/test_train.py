"""End-to-end training on the shipped tiny model: every method, real TRL, real MLflow store."""

import re
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollverify.core.methods import METHODS
from rollverify.cost import trace
from rollverify.rollout.engines.protocol import SyncCheckError
from rollverify.tasks.chain import ChainProblem, chain_reward
from rollverify.tracking import metric_names as declared
from rollverify.training.cost_settings import pricing_layout
from rollverify.training.parts import make_engine
from rollverify.training.run import run_dir_for, train
from tests.runs import cached, comparable, history, tiny, unfinished

PROMPT = re.compile(r"Q:(\d)\+(\d)x(\d+)=")


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_trains_end_to_end(tmp_path, method):
    config = tiny(tmp_path, method)
    summary = train(config)
    metrics = history(summary)
    for name in [
        "reward_mean",
        "entropy_mean",
        "ops_mean",
        "response_length_mean",
        "response_length_p99",
        "staleness_mean",
        "tokens_generated",
        "tokens_discarded",
        "rollout_seconds",
        "verify_seconds",
        "measure_seconds",
        "train_seconds",
        "sync_seconds",
        "device_seconds",
        "switched",
    ]:
        assert sorted(metrics[name]) == [1, 2, 3], name
    assert declared.unknown(metrics) == [], (
        "every logged name is in rollverify/tracking/metric_names.py"
    )
    for name in ["trl/loss", "trl/grad_norm", "trl/learning_rate", "trl/num_tokens"]:
        assert sorted(metrics[name]) == [1, 2, 3], name  # TRL's own, every step
    assert max(metrics["trl/grad_norm"].values()) > 0  # (0 where every group ties)
    assert set(metrics["trl/learning_rate"].values()) == {config.train.learning_rate}
    assert sorted(metrics["eval_accuracy"]) == [0, 3]  # base model, and the end
    assert all(0 <= r <= 1 for r in metrics["reward_mean"].values())
    resumed = metrics["resumed"]
    if METHODS[method].partial:
        assert resumed[2] + resumed[3] > 0, "partial methods resume cached trajectories"
        assert metrics["staleness_mean"][2] + metrics["staleness_mean"][3] > 0
    else:
        assert set(resumed.values()) == {0.0}
        # on-policy: the engine's log-probs and the trainer's agree to float rounding
        assert all(v == pytest.approx(0.0, abs=1e-4) for v in metrics["ops_mean"].values())
    # Scoring the method acts on is its cost (verify); scoring only for the logs is not.
    acts_on_scores = METHODS[method].verify or METHODS[method].sample_filter == "ops"
    assert (sum(metrics["verify_seconds"].values()) > 0) == acts_on_scores
    measured = sum(metrics["measure_seconds"].values())
    assert measured > 0, "every method logs the batch's OPS"
    assert metrics["cost_measure_device_seconds"][3] == pytest.approx(measured)
    params = MlflowClient(summary.tracking_uri).get_run(summary.run_id).data
    assert params.params["train.method"] == method and params.tags["method"] == method


def test_rewards_are_scored_from_the_real_generations(tmp_path):
    config = tiny(tmp_path, "partial")
    from rollverify.training import loop as loop_module

    batches = []
    original = loop_module.TrainingLoop.reward

    def spy(self, completions, answer, **kwargs):  # TRL's decoded texts beside our rewards
        rewards = original(self, completions=completions, answer=answer, **kwargs)
        trained = self.trained_batch.result.trajectories()
        prompts = [self.task.tokenizer.decode(t.prompt_ids) for t in trained]
        batches.append((list(completions), list(answer), rewards, prompts))
        return rewards

    loop_module.TrainingLoop.reward = spy
    try:
        train(config)
    finally:
        loop_module.TrainingLoop.reward = original
    assert len(batches) == 3
    for completions, answers, rewards, prompts in batches:
        for completion, answer, reward, prompt in zip(
            completions, answers, rewards, prompts, strict=True
        ):
            start, add, steps = map(int, PROMPT.fullmatch(prompt).groups())
            assert answer == ChainProblem(start, add, steps).answer  # the right group's answer
            assert reward == chain_reward(completion, answer)
    assert any(r == 1.0 for *_, rs, _ in batches for r in rs)  # the base model solves some


def test_rollverify_truncates_when_the_policy_moved(tmp_path):
    """The cache holds the verified prefixes after each cycle (checkpointed right after it),
    and generation regenerates the dropped suffixes."""
    settings = {
        "train.learning_rate": 0.05,
        "train.checkpoint_every": 1,
        "train.keep_checkpoints": 4,
    }
    summary = train(tiny(tmp_path, "rollverify-seq-token", **settings))
    metrics = history(summary)
    verified = [s for s, tokens in metrics["cache_tokens_verified"].items() if tokens > 0]
    assert verified
    assert min(metrics["acceptance_rate"][s] for s in verified) < 1.0
    assert sum(metrics["tokens_discarded"].values()) > 0
    for step in verified:
        waiting = sum(len(t) for t in unfinished(cached(summary.run_dir, step)))
        kept = metrics["acceptance_rate"][step] * metrics["cache_tokens_verified"][step]
        assert waiting == round(kept), f"step {step}: the cache must hold what verification kept"
    assert metrics["tokens_regenerated_total"][3] > 0


def test_rollverify_keeps_everything_when_the_policy_did_not_move(tmp_path):
    summary = train(tiny(tmp_path, "rollverify", **{"train.learning_rate": 1e-12}))
    metrics = history(summary)
    verified = [s for s, tokens in metrics["cache_tokens_verified"].items() if tokens > 0]
    assert verified
    assert all(metrics["acceptance_rate"][s] == 1.0 for s in verified)
    assert all(metrics["ops_cache_before"][s] < 1e-3 for s in verified)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["grpo", "rollverify"])
def test_seeded_runs_are_reproducible(tmp_path, method):
    first = history(train(tiny(tmp_path / "a", method)))
    second = history(train(tiny(tmp_path / "b", method)))
    assert comparable(first) == comparable(second)


@pytest.mark.slow
def test_partial_that_never_pauses_equals_grpo(tmp_path):
    grpo = history(train(tiny(tmp_path / "grpo", "grpo")))
    partial = history(
        train(tiny(tmp_path / "partial", "partial", **{"rollout.max_inflight_groups": 2}))
    )
    assert comparable(grpo) == comparable(partial)
    assert torch.tensor(list(partial["paused"].values())).eq(0).all()


@pytest.mark.slow
def test_not_measuring_the_cache_changes_no_step_and_logs_no_cache_ops(tmp_path):
    """tracking.cache_ops false skips the forward over the cache that only fed the logs: the
    run trains the same steps, without ops_cache_* and with no measuring time."""
    measured = history(train(tiny(tmp_path / "on", "partial")))
    skipped = history(train(tiny(tmp_path / "off", "partial", **{"tracking.cache_ops": False})))
    what_the_measure_counts = ("ops_cache", "cache_tokens_verified", "modeled_measure")
    what_the_measure_counts += ("threshold_grid/",)  # (read off the measured cache too)
    same = {
        k: v for k, v in comparable(measured).items() if not k.startswith(what_the_measure_counts)
    }
    assert same == {k: v for k, v in comparable(skipped).items() if k in same}
    assert set(same) >= {"reward_mean", "entropy_mean", "eval_accuracy", "tokens_generated"}
    assert measured["ops_cache_before"] and "ops_cache_before" not in skipped
    assert sum(measured["measure_seconds"].values()) > 0
    assert sum(skipped["measure_seconds"].values()) < sum(measured["measure_seconds"].values())


@pytest.mark.slow
def test_filters_drop_stale_and_off_policy_samples(tmp_path):
    stale = history(
        train(tiny(tmp_path / "s", "staleness-filter", **{"verify.staleness_bound": 0}))
    )
    assert sum(stale["samples_dropped"].values()) > 0
    for step, dropped in stale["samples_dropped"].items():  # bound 0: every stale one goes
        assert (dropped > 0) == (stale["staleness_mean"][step] > 0)
    off = history(
        train(
            tiny(
                tmp_path / "o",
                "ops-filter",
                **{"verify.ops_bound": 1e-9, "train.learning_rate": 0.05},
            )
        )
    )
    assert sum(off["samples_dropped"].values()) > 0
    assert sum(off["tokens_discarded"].values()) > 0


def test_a_failed_weight_sync_check_stops_the_run(tmp_path):
    """An engine that samples from other weights than the trainer's (here: its copy of the model
    in bfloat16, the trainer in float32) fails the probe check after the first update, and the
    run stops there with the numbers, its MLflow run FAILED."""
    config = tiny(tmp_path, "grpo")
    tokenizer = AutoTokenizer.from_pretrained(config.model_path())
    engine = make_engine(
        config, AutoModelForCausalLM.from_pretrained(config.model_path()), tokenizer
    )
    engine.model.to(torch.bfloat16)  # its copy rounded: every sync lands in bfloat16
    with pytest.raises(SyncCheckError, match=r"after step 1: .* differ by .* > vllm.sync_check"):
        train(config, engine=engine)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("rollverify").experiment_id])
    assert run.info.status == "FAILED"
    assert not client.get_metric_history(run.info.run_id, "reward_mean"), "no step is logged"


@pytest.mark.parametrize("method", ["grpo", "rollverify"])
def test_the_trace_counts_what_the_engine_and_trainer_did_and_prices_it(tmp_path, method):
    """Every step is traced (rollverify/cost/trace.py): the engine's iterations account for every
    token generated, the trainer's rows for the batch it trained; the ledger prices the trace
    on the configured GPU (modeled_*), beside the measured device-seconds."""
    config = tiny(tmp_path, method)
    summary = train(config)
    metrics = history(summary)
    folder = Path(summary.run_dir) / "trace"
    engine = trace.read(folder).to_pylist()
    trainer = {row["step"]: row for row in trace.read(folder, "trainer").to_pylist()}
    batch = config.rollout.batch_groups * config.rollout.group_size
    for step in (1, 2, 3):
        rows = [r for r in engine if r["step"] == step and r["phase"] == "rollout"]
        sampled = sum(r["decode_rows"] + r["prefill_rows"] for r in rows)
        assert sampled == metrics["tokens_generated"][step], "one token per row per iteration"
        assert all(r["seconds"] > 0 for r in rows), "the in-process engine times each one"
        completions = metrics["response_length_mean"][step] * batch
        assert trainer[step]["tokens_trained"] > completions  # + their prompts
        verified = method == "rollverify" and metrics["cache_tokens_verified"][step] > 0
        assert (trainer[step]["tokens_scored"] > 0) == verified, "verification is its cost"
        assert trainer[step]["tokens_measured"] > 0  # the batch's OPS, for the logs
    assert {r["phase"] for r in engine if r["step"] == 0} == {"eval"}  # the base model's
    gpus = pricing_layout(config).gpus
    assert gpus == 1  # the in-process engine, colocated on train.processes
    modeled = metrics["modeled_wall_seconds"]
    assert all(modeled[s] < modeled[s + 1] for s in (1, 2))
    assert metrics["modeled_gpu_days"][3] == pytest.approx(modeled[3] * gpus / 86_400)
    assert metrics["modeled_rollout_seconds"][3] > 0 and metrics["modeled_train_seconds"][3] > 0


def test_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path):
    """A sweep's trials of one seed start side by side: each needs its own folder."""
    config = tiny(tmp_path, "rollverify")
    assert len({run_dir_for(config) for _ in range(50)}) == 50
