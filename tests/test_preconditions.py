"""`rvctl preconditions` (rollverify/experiments/preconditions.py): the starting policy measured
on the held-out set as a run samples it, and, from a store, each run's stale share and whether
its evaluations stayed stable by the rule docs/results.md writes beside the table."""

from __future__ import annotations

import json

import pytest

from rollverify.experiments.preconditions import growth, learning, quantile, stable


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


def test_the_growth_figures_are_the_quarters_and_the_end_as_written():
    """docs/results.md's growing-length preconditions, on a run whose answers are known: 20
    steps, lengths median 10 for the first 5 steps and 30 for the last 5; p95 4x the median in
    the last 2 steps (the last 10%); staleness 1.0 then 2.0."""
    steps = range(1, 21)
    median = {s: 10.0 if s <= 5 else 30.0 if s > 15 else 20.0 for s in steps}
    p95 = {s: median[s] * (4.0 if s > 18 else 2.0) for s in steps}
    stale = {s: 1.0 if s <= 5 else 2.0 if s > 15 else 1.5 for s in steps}
    history = {"response_length_median": median, "response_length_p95": p95}
    found = growth(history | {"staleness_token_mean": stale}, [])
    assert found["length_growth"] == pytest.approx(3.0)
    assert found["p95_over_median_at_end"] == pytest.approx(4.0)
    assert found["staleness_growth"] == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("evaluations", "expected"),
    [
        ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0], "improving"),
        ([0.1, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.605, 0.6, 0.6], "plateaued by 80%"),
        ([0.1, 0.2, 0.3, 0.6, 0.6, 0.6, 0.6, 0.5, 0.7, 0.5], "neither"),  # a late spike, no climb
    ],
)
def test_learning_is_improving_a_plateau_or_neither(evaluations, expected):
    assert learning([(10 * i, v) for i, v in enumerate(evaluations)]) == expected


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
