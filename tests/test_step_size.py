"""The step-size table (rollverify/experiments/step_size.py, `rvctl report --table step-size`):
per method and learning rate, the drift per version, the acceptance that decides the switch, the
switch steps, and the paired ΔAUC and cost against grpo at the same learning rate."""

from __future__ import annotations

import pytest

from rollverify.experiments import step_size
from rollverify.tracking.run_records import RunRecord

STEPS = 20  # 85% of it: step 17


def run(method, seed, lr, auc, days, **history) -> RunRecord:
    params = {"train.method": method, "train.seed": str(seed), "train.learning_rate": lr}
    params |= {"train.steps": str(STEPS), "verify.window": "2", "verify.ds": "0.01"}
    curve = {0: auc, 10: auc, 20: auc}
    recorded = {"eval_accuracy": curve, "modeled_gpu_days": {STEPS: days}} | history
    return RunRecord(f"{method}-{seed}-{lr}", method, seed, "FINISHED", 0, params, recorded)


def grpo(lr: str, climbing: bool = False) -> list[RunRecord]:
    runs = [run("grpo", s, lr, 0.5 + s / 10, 1.0 + s) for s in range(3)]
    if climbing:  # rising at each of the last two evaluations
        for r in runs:
            r.history["eval_accuracy"] = {0: 0.3, 10: 0.4, 20: 0.5}
    return runs


def rollverify(seed: int, switch_at: int | None) -> RunRecord:
    """At lr 1e-4: drift 0.004 then 0.002 (first window: 0.003, ds 0.01: 0.3), acceptance 0.4,
    0.6, then 0.9; the window mean logged every step, until a switch."""
    last = switch_at or STEPS
    # step 1's window holds one rate (not full: it cannot switch), step 2's is the first full
    windows = {s: 0.4 if s == 1 else 0.5 if s == 2 else 0.8 + s / 1000 for s in range(1, last + 1)}
    return run(
        "rollverify",
        seed,
        "1e-4",
        0.52 + seed / 10,
        0.5 * (1.0 + seed),
        drift_ops={1: 0.004, 2: 0.002, 3: 0.001, 4: 0.001},
        acceptance_rate={s: 0.4 if s == 1 else 0.6 if s == 2 else 0.9 for s in windows},
        acceptance_window_mean=windows,
        switched={s: float(switch_at is not None and s >= switch_at) for s in range(1, STEPS)},
    )


def test_a_row_holds_the_first_windows_drift_acceptance_and_switch_against_grpo_at_its_rate():
    # grpo at 5e-4 first: the first grpo run of each seed is not its twin
    runs = [*grpo("5e-4", climbing=True), *grpo("1e-4"), *(rollverify(s, None) for s in (0, 1))]
    runs.append(rollverify(2, 9))
    partial_fast = [run("partial", s, "5e-4", 0.45 + s / 10, 0.3 * (1 + s)) for s in range(3)]
    rows = {r["point"]: r for r in step_size.rows(runs + partial_fast)}
    assert set(rows) == {"rollverify", "partial"}  # each method at one learning rate here
    verified = rows["rollverify"]
    assert verified["learning_rate"] == "1e-4" and verified["baseline"].endswith("=1e-4")
    assert verified["drift_first_window"] == pytest.approx(0.003)
    assert verified["drift"] == pytest.approx(0.002)
    assert verified["drift_over_ds"] == pytest.approx(0.3)
    assert verified["acceptance_first_window"] == pytest.approx(0.5)
    assert verified["acceptance_lowest"] == pytest.approx(0.5)  # full windows only
    # step 17's window mean on the two seeds still verifying; the switched seed left out
    assert verified["acceptance_late"] == pytest.approx(0.817)
    assert verified["per_seed"]["2"]["acceptance_late"] is None
    assert (verified["switched"], verified["switch_steps"]) == (1, [9])
    # paired with grpo at 1e-4 (AUC 0.5, 0.6, 0.7; GPU-days 1, 2, 3), not at 5e-4
    assert verified["auc_vs_base"] == pytest.approx(0.02)
    assert verified["cost"] == pytest.approx(0.5) and verified["pairs"] == 3
    assert verified["grpo_climbing"] is False
    assert rows["partial"]["grpo_climbing"] is True  # grpo at 5e-4 rose at every evaluation
    assert rows["partial"]["acceptance_first_window"] is None  # it verifies nothing


def test_auto_thresholds_divide_by_what_they_applied():
    auto = rollverify(0, None)
    auto.params["verify.ds"] = "auto"
    auto.history["verify_ds"] = {1: 0.008, 2: 0.004, 3: 0.1}  # the first window: 0.006
    assert step_size.drift_over_ds(auto) == pytest.approx(0.003 / 0.006)


def test_the_command_prints_the_table(study_store, rvctl):
    result = rvctl("report", "--tracking-uri", study_store.uri, "--table", "step-size", "-f", "md")
    assert result.returncode == 0, result.stderr
    header, _, *lines = result.stdout.splitlines()
    assert "switched (steps)" in header and "first-window drift / ds" in header
    assert any(line.startswith("| rollverify") for line in lines)
