"""`rvctl preconditions` (rollverify/experiments/preconditions.py): the starting policy measured
on the held-out set as a run samples it, and, from a store, each run's stale share and whether
its evaluations stayed stable by the rule docs/results.md writes beside the table."""

from __future__ import annotations

import json

import pytest

from rollverify.experiments.preconditions import quantile, stable


@pytest.mark.parametrize(
    ("evaluations", "expected"),
    [
        ([0.3, 0.5, 0.45, 0.6], True),  # a dip of 0.05 below the best so far
        ([0.3, 0.5, 0.39, 0.6], False),  # 0.11 below the best before it, though it recovers
        ([0.5, 0.6, 0.5], False),  # the last is not above the first
        ([0.5, 0.4, 0.45], False),
    ],
)
def test_stable_means_no_fall_past_a_tenth_and_an_end_above_the_start(evaluations, expected):
    assert stable(evaluations) is expected


def test_the_quantiles_are_of_the_sorted_lengths():
    lengths = list(range(1, 101))  # 1..100
    assert (quantile(lengths, 0.5), quantile(lengths, 0.95), quantile(lengths, 1.0)) == (
        51,
        96,
        100,
    )


def test_the_command_measures_the_starting_policy_and_reads_the_runs(tmp_path, rvctl, empty_store):
    from tests.report_store import Store
    from tests.runs import tiny_file
    from tests.study_store import make_study_store

    store = make_study_store(Store(tmp_path, empty_store))
    config = tiny_file(tmp_path / "tiny.yaml", **{"task.eval_samples": 2})
    out = tmp_path / "preconditions.json"
    result = rvctl("preconditions", "--config", str(config), "--store",
                   str(tmp_path / "mlflow.db"), "--out", str(out), "-f", "json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(out.read_text())
    measured = json.loads(out.read_text())
    policy = measured["policy"]
    assert policy["samples_per_problem"] == 2 and policy["problems"] > 0
    assert 0.0 <= policy["sampled_accuracy"] <= 1.0 and policy["token_entropy_mean"] > 0.0
    assert policy["length_median"] <= policy["length_p95"] <= policy["length_p99"]
    assert policy["length_p99"] <= policy["length_max"]
    runs = measured["runs"]
    assert len(runs) == 37  # every finished training run of the store
    logged = store.client.get_metric_history(runs[0]["run_id"], "eval_accuracy")
    evaluations = [v for _, v in sorted((p.step, p.value) for p in logged)]
    assert runs[0]["stable"] is stable(evaluations)
    assert [value for _, value in runs[0]["evaluations"]] == evaluations


def test_a_store_that_is_not_there_is_one_line_and_exit_2(tmp_path, rvctl):
    result = rvctl("preconditions", "--config", "experiments/stale.yaml", "--store",
                   str(tmp_path / "none.db"))  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --store: {tmp_path / 'none.db'} is not a file; give the study's MLflow .db"
    ]
