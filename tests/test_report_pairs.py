"""rvctl report's differences to grpo: paired by seed, their intervals and detectable
differences, in method tables and in grids over methods."""

import pytest

from rollverify.experiments.report import (
    method_rows,
    paired_diffs,
    sweep_rows,
    t_critical_95,
)
from rollverify.tracking.plots import plot_gaps
from tests.report_store import (
    GRPO,
    PAIRED_COLUMNS,
    PARTIAL,
    T_975_DOF2,
    assert_the_hand_computation,
    by_method,
    record,
    runs_of,
)


def test_a_seed_finished_twice_pairs_with_grpo_once():
    runs = runs_of("grpo", GRPO) + runs_of("partial", PARTIAL)
    runs += [record("grpo", 0, 0.0, 9.0, 9.0), record("partial", 1, 0.0, 9.0, 9.0)]  # later
    rows = by_method(method_rows(runs))
    assert_the_hand_computation(rows["partial"])
    assert rows["partial"]["seeds"] == 3 and rows["partial"]["duplicates"] == 1


def test_t_quantile_matches_the_tables():
    assert t_critical_95(2) == pytest.approx(T_975_DOF2, rel=1e-9)
    assert t_critical_95(10) == pytest.approx(2.228138851986274, rel=1e-9)


def test_the_paired_interval_matches_a_hand_computation():
    rows = by_method(method_rows(runs_of("grpo", GRPO) + runs_of("partial", PARTIAL)))
    assert_the_hand_computation(rows["partial"])
    assert all(rows["grpo"][k] is None for k in PAIRED_COLUMNS)  # no difference to itself


def test_runs_pair_by_seed_not_by_order():
    grpo, partial = runs_of("grpo", GRPO), runs_of("partial", PARTIAL)
    alone = record("partial", 5, 0.0, 9.0, 9.0)  # no grpo run on seed 5: not paired
    runs = [partial[2], grpo[0], alone, partial[0], grpo[2], grpo[1], partial[1]]
    assert_the_hand_computation(by_method(method_rows(runs))["partial"])


def test_fewer_than_three_pairs_give_a_difference_without_an_interval():
    two = {seed: PARTIAL[seed] for seed in (0, 1)}
    row = paired_diffs(runs_of("partial", two), runs_of("grpo", GRPO))
    assert row["pairs"] == 2
    assert row["accuracy_diff_vs_grpo"] == pytest.approx((0.1 + 0.2) / 2)
    assert row["accuracy_diff_ci95"] is None and row["device_days_diff_ci95"] is None
    assert row["accuracy_mde80"] is None and row["auc_mde80"] is None
    assert row["modeled_gpu_days_diff_ci95"] is None
    none = paired_diffs(runs_of("partial", PARTIAL), [])  # no grpo run
    assert none["pairs"] == 0 and all(none[k] is None for k in PAIRED_COLUMNS[1:])


def test_unfinished_runs_are_not_paired():
    runs = runs_of("grpo", GRPO) + runs_of("partial", PARTIAL)
    runs += [record("grpo", 3, 0.1, 1.0, 1.0, status="KILLED"), record("partial", 3, 0.9, 5, 5)]
    runs += [record("grpo", 4, 0.1, 1.0, 1.0), record("partial", 4, 0.9, 5, 5, status="RUNNING")]
    assert_the_hand_computation(by_method(method_rows(runs))["partial"])


def test_a_grid_over_methods_pairs_each_point_with_grpo_at_the_same_knob(tmp_path):
    """sweep method knob: partial at knob=4 is compared with grpo at knob=4 (seed by seed), not
    with grpo at knob=1; grpo's points get no difference. The gap plot draws it."""
    params = ["train.method", "train.updates_per_rollout"]

    def at(knob, runs):
        for run in runs:
            run.params["train.updates_per_rollout"] = str(knob)
        return runs

    far = {seed: (a - 0.4, d, m) for seed, (a, d, m) in GRPO.items()}  # grpo at knob 1
    runs = at(4, runs_of("grpo", GRPO)) + at(4, runs_of("partial", PARTIAL))
    runs += at(1, runs_of("grpo", far)) + at(1, runs_of("partial", PARTIAL))
    rows = {(r["method"], r["updates_per_rollout"]): r for r in sweep_rows(runs, params)}
    assert_the_hand_computation(rows[("partial", 4)])
    assert rows[("partial", 1)]["accuracy_diff_vs_grpo"] == pytest.approx(0.116666667 + 0.4)
    assert all(rows[("grpo", k)][c] is None for k in (1, 4) for c in PAIRED_COLUMNS)
    path = plot_gaps(list(rows.values()), "updates_per_rollout", tmp_path)
    assert path.name == "accuracy_gap_vs_updates_per_rollout.png" and path.stat().st_size > 0
    ds_dt = sweep_rows(at(4, runs_of("rollverify", PARTIAL)), ["verify.ds"])
    assert "pairs" not in ds_dt[0], "a grid of one method has nothing to pair"
    assert plot_gaps(ds_dt, "ds", tmp_path) is None


def test_a_point_without_grpo_at_its_values_pairs_with_grpos_only_point():
    """rollverify at dt 0.2 reported beside a grpo sweep (dt 2 there): grpo never reads dt,
    so its only point is the one to pair with; with two grpo points there is no telling."""
    params = ["train.method", "verify.dt"]

    def at(dt, runs):
        for run in runs:
            run.params["verify.dt"] = str(dt)
        return runs

    runs = at(2, runs_of("grpo", GRPO)) + at(0.2, runs_of("partial", PARTIAL))
    rows = {(r["method"], r["dt"]): r for r in sweep_rows(runs, params)}
    assert_the_hand_computation(rows[("partial", 0.2)])
    far = {seed: (a - 0.4, d, m) for seed, (a, d, m) in GRPO.items()}
    rows = sweep_rows(runs + at(4, runs_of("grpo", far)), params)
    (point,) = [r for r in rows if r["method"] == "partial"]
    assert point.get("pairs") is None
