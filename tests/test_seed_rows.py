"""Per-seed rows (`rvctl report --per-seed`): a collapsing run's peak before its fall."""

import pytest

from rollverify.experiments.seed_rows import seed_rows
from rollverify.tracking.run_records import Report, RunRecord


def run(seed: int, evals: dict[int, float], **history: dict[int, float]) -> RunRecord:
    return RunRecord(
        run_id=f"r{seed}",
        method="partial-recomputed",
        seed=seed,
        status="FINISHED",
        start_time=seed,
        params={"train.method": "partial-recomputed"},
        history={"eval_accuracy": evals} | {f"trl/{k}": v for k, v in history.items()},
    )


def test_a_row_holds_the_best_evaluation_and_its_earliest_step():
    """Prosperity before collapse: seed 0 climbs to 0.9 at step 20, holds it at 30, ends at
    0.1; its peak is 0.9 at step 20 (the first time), its final 0.1. Seed 1 never falls."""
    collapsing = run(0, {0: 0.3, 10: 0.8, 20: 0.9, 30: 0.9, 40: 0.1})
    steady = run(1, {0: 0.3, 10: 0.5, 20: 0.6, 30: 0.7, 40: 0.8})
    report = Report("sqlite://", "runs", [], [], [collapsing, steady])
    rows = {row["seed"]: row for row in seed_rows(report)}
    assert (rows[0]["eval_accuracy_peak"], rows[0]["eval_peak_step"]) == (0.9, 20)
    assert rows[0]["eval_accuracy"] == 0.1
    assert (rows[1]["eval_accuracy_peak"], rows[1]["eval_peak_step"]) == (0.8, 40)
    assert rows[1]["eval_accuracy_before"] == 0.3


def test_a_row_holds_how_often_the_clip_cut_and_the_largest_gradient_norm():
    """Means over steps of TRL's clip share; the largest gradient norm (a collapse's spike)."""
    spiking = run(0, {0: 0.3}, grad_norm={1: 0.1, 2: 1.9, 3: 0.2})
    spiking.history["trl/clip_ratio/region_mean"] = {1: 0.0, 2: 0.06, 3: 0.03}
    never = run(1, {0: 0.3}, grad_norm={1: 0.1})
    never.history["trl/clip_ratio/region_mean"] = {1: 0.0, 2: 0.0}
    report = Report("sqlite://", "runs", [], [], [spiking, never])
    rows = {row["seed"]: row for row in seed_rows(report)}
    assert rows[0]["clip_share_mean"] == pytest.approx(0.03)
    assert (rows[0]["grad_norm_max"], rows[1]["grad_norm_max"]) == (1.9, 0.1)
    assert rows[1]["clip_share_mean"] == 0.0


def test_a_row_holds_the_first_windows_drift_and_acceptance():
    """The switch is decided over the first full window (the run's verify.window steps that
    logged the metric): their mean drift and acceptance, not the whole run's."""
    early = run(0, {0: 0.3})
    early.params["verify.window"] = "3"
    early.history["drift_ops"] = {2: 0.004, 3: 0.002, 4: 0.003, 5: 0.001, 9: 0.001}
    early.history["acceptance_rate"] = {1: 0.2, 2: 0.5, 3: 0.8, 4: 0.9, 5: 0.9}
    early.history["verify_ds"] = {1: 0.002, 2: 0.004}
    (row,) = seed_rows(Report("sqlite://", "runs", [], [], [early]))
    assert row["drift_ops_first_window"] == pytest.approx(0.003)
    assert row["acceptance_first_window"] == pytest.approx(0.5)
    assert row["verify_ds_mean"] == pytest.approx(0.003)
    assert row["drift_ops"] == pytest.approx(0.0022)
