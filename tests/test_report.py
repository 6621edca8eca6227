"""rvctl report's rows: tables from a real MLflow sqlite store, with runs logged the way training
does (tests/report_store.py)."""

import json
import math
import statistics

import numpy as np
import pytest
from typer.testing import CliRunner

from rollverify.experiments.report import (
    method_rows,
    run_groups,
    sweep_grid,
    sweep_rows,
)
from rollverify.tracking.run_records import load_report
from rvctl.app import app
from tests.report_store import (
    GRPO,
    PARTIAL,
    STEPS,
    T_975_DOF2,
    Store,
    assert_the_hand_computation,
    by_method,
    last,
    runs_of,
)


def test_method_rows_match_what_was_logged(store):
    report = load_report([store.compare], store.uri)
    assert report.kind == "compare" and report.parent_run_ids == [store.compare]
    rows = method_rows(report.runs)
    assert [r["method"] for r in rows] == ["grpo", "partial", "rollverify", "ops-filter"]
    grpo, partial, rv = (by_method(rows)[m] for m in ("grpo", "partial", "rollverify"))

    finals = [h.history["eval_accuracy"][STEPS] for h in store.runs["rollverify"]]
    assert rv["seeds"] == 3 and rv["status"] == "finished"
    assert rv["eval_accuracy_mean"] == pytest.approx(statistics.mean(finals))
    ci = T_975_DOF2 * statistics.stdev(finals) / math.sqrt(3)
    assert rv["eval_accuracy_ci95"] == pytest.approx(ci, rel=1e-6)
    before = [h.history["eval_accuracy"][0] for h in store.runs["rollverify"]]
    assert rv["eval_accuracy_before"] == pytest.approx(statistics.mean(before))

    days = {m: statistics.mean(last(h.history["cost_gpu_days"]) for h in runs)
            for m, runs in store.runs.items()}  # fmt: skip
    assert rv["device_days"] == pytest.approx(days["rollverify"])
    assert rv["device_speedup_vs_grpo"] == pytest.approx(days["grpo"] / days["rollverify"])
    assert partial["device_speedup_vs_grpo"] == pytest.approx(days["grpo"] / days["partial"])
    assert grpo["device_speedup_vs_grpo"] == pytest.approx(1.0)
    assert rv["device_speedup_vs_grpo"] > 1.5  # logged at half grpo's cost per step
    modeled = {m: statistics.mean(last(h.history["modeled_gpu_days"]) for h in runs)
               for m, runs in store.runs.items()}  # fmt: skip
    assert rv["modeled_gpu_days"] == pytest.approx(modeled["rollverify"])
    assert rv["modeled_speedup_vs_grpo"] == pytest.approx(modeled["grpo"] / modeled["rollverify"])
    assert grpo["modeled_speedup_vs_grpo"] == pytest.approx(1.0)

    ops = [np.mean(list(h.history["ops_mean"].values())) for h in store.runs["rollverify"]]
    assert rv["ops_mean"] == pytest.approx(np.mean(ops))
    for name in ("staleness_mean", "mismatch_kl"):  # read back from the store
        means = [np.mean(list(h.history[name].values())) for h in store.runs["rollverify"]]
        assert rv[name] == pytest.approx(np.mean(means)), name
    # seed 2 logged NaN at its last step: its final rate is the step before
    acceptance = [last(h.history["acceptance_rate"]) for h in store.runs["rollverify"]]
    assert acceptance[1] == store.runs["rollverify"][1].history["acceptance_rate"][STEPS - 1]
    assert rv["acceptance_rate_final"] == pytest.approx(statistics.mean(acceptance))
    assert rv["switch_step"] == 8  # median of 7 and 9; seed 3 never switched

    assert grpo["acceptance_rate_final"] is None and grpo["switch_step"] is None
    assert partial["seeds"] == 1 and partial["eval_accuracy_ci95"] is None
    assert partial["eval_accuracy_mean"] == pytest.approx(
        store.runs["partial"][0].history["eval_accuracy"][STEPS]
    )


def test_unfinished_runs_are_counted_not_averaged(store):
    rows = by_method(method_rows(load_report([store.compare], store.uri).runs))
    # the KILLED run (seed 4) logged a 30x cost and switched at step 2: neither shows
    assert rows["rollverify"]["unfinished"] == 1 and rows["rollverify"]["seeds"] == 3
    assert rows["rollverify"]["switch_step"] == 8
    killed_days = last(store.killed.history["cost_gpu_days"])
    assert rows["rollverify"]["device_days"] < killed_days / 5
    assert rows["grpo"]["unfinished"] == 0


def test_a_method_with_only_unfinished_runs_reports_nulls(store):
    row = by_method(method_rows(load_report([store.compare], store.uri).runs))["ops-filter"]
    assert row["status"] == "unfinished" and row["seeds"] == 0 and row["unfinished"] == 2
    counts = ("method", "status", "seeds", "unfinished", "duplicates", "pairs")
    numbers = [k for k in row if k not in counts]
    assert numbers and all(row[k] is None for k in numbers) and row["pairs"] == 0


def test_sweep_rows_per_grid_point(store):
    report = load_report([store.sweep], store.uri)
    assert report.kind == "sweep" and report.sweep_params == ["verify.ds", "verify.dt"]
    rows = sweep_rows(report.runs, report.sweep_params)
    points = [(r["ds"], r["dt"]) for r in rows]
    assert points == [(0.01, 2.0), (0.01, "inf"), (0.1, 2.0), (0.1, "inf")]
    first = rows[0]
    finals = [h.history["eval_accuracy"][5] for h in store.points[("0.01", "2.0")]]
    assert first["seeds"] == 2 and first["eval_accuracy_mean"] == pytest.approx(np.mean(finals))
    assert first["eval_accuracy_ci95"] is not None and rows[1]["eval_accuracy_ci95"] is None
    days = [last(h.history["cost_gpu_days"]) for h in store.points[("0.01", "2.0")]]
    assert first["device_days"] == pytest.approx(np.mean(days))
    assert rows[3]["status"] == "unfinished" and rows[3]["unfinished"] == 1
    assert rows[3]["eval_accuracy_mean"] is None

    grid = sweep_grid(rows, "ds", "dt", "eval_accuracy_mean")
    assert [g["ds"] for g in grid] == [0.01, 0.1] and list(grid[0]) == ["ds", "dt=2", "dt=inf"]
    assert grid[1]["dt=inf"] is None and grid[0]["dt=2"] == first["eval_accuracy_mean"]


def test_a_seed_finished_twice_counts_once_and_the_report_says_so(tmp_path, empty_store):
    """A store may hold a sweep's grid point trained twice (older code resumed a finished point
    again, issue 52): its seed counts once (its first run), the row counts the other in
    `duplicates`, and rvctl report says so."""
    s = Store(tmp_path, empty_store)
    sweep = s.parent("sweep", sweep_params="verify.ds", method="rollverify")
    params = {"verify.ds": "0.01"}
    first = s.run("rollverify", 1, parent=sweep, params=params, steps=5)
    s.run("rollverify", 1, parent=sweep, params=params, steps=5, cost_per_step=6000)  # again
    other = s.run("rollverify", 2, parent=sweep, params=params, steps=5)
    (row,) = sweep_rows(load_report([sweep], s.uri).runs, ["verify.ds"])
    assert row["seeds"] == 2 and row["duplicates"] == 1 and row["unfinished"] == 0
    finals = [h.history["eval_accuracy"][5] for h in (first, other)]
    assert row["eval_accuracy_mean"] == pytest.approx(statistics.mean(finals))
    days = [last(h.history["cost_gpu_days"]) for h in (first, other)]
    assert row["device_days"] == pytest.approx(statistics.mean(days))
    args = ["report", sweep, "--tracking-uri", s.uri, "--format", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [r["duplicates"] for r in json.loads(result.stdout)] == [1]
    assert "note: 1 finished run(s) repeat a seed their row already counts" in result.stderr


def test_a_method_at_two_settings_is_two_rows_each_against_grpo_at_its_own(tmp_path, empty_store):
    """rollverify at the paper's thresholds and at ds=auto (issue 77's store) are two rows of
    their seeds, not one row that counts the second setting's runs as duplicates; grpo at two
    learning rates is two rows, and each rollverify row pairs with grpo at its own rate."""
    s = Store(tmp_path, empty_store)
    logged = {}
    for seed in (1, 2, 3):
        for lr in ("1e-4", "2e-4"):
            logged["grpo", lr, seed] = s.run("grpo", seed, params={"train.lr": lr})
            for ds in ("0.01", "auto"):
                params = {"train.lr": lr, "verify.ds": ds}
                logged[ds, lr, seed] = s.run("rollverify", seed, params=params)
    rows = method_rows(load_report([], s.uri).runs)
    settings = [(r["method"], r["settings"]) for r in rows]
    assert settings == [("grpo", "lr=1e-4"), ("grpo", "lr=2e-4")] + [
        ("rollverify", f"lr={lr}, ds={ds}") for lr in ("1e-4", "2e-4") for ds in ("0.01", "auto")
    ]
    assert all(r["seeds"] == 3 and not r["duplicates"] for r in rows)
    for row in rows[2:]:
        lr, ds = (part.split("=")[1] for part in row["settings"].split(", "))
        mine = [logged[ds, lr, seed].history["eval_accuracy"][STEPS] for seed in (1, 2, 3)]
        theirs = [logged["grpo", lr, seed].history["eval_accuracy"][STEPS] for seed in (1, 2, 3)]
        assert row["pairs"] == 3
        assert row["accuracy_diff_vs_grpo"] == pytest.approx(
            statistics.mean(mine) - statistics.mean(theirs)
        )
    args = ["report", "--tracking-uri", s.uri, "--format", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [r.get("settings") for r in json.loads(result.stdout)] == [v for _, v in settings]
    assert "repeat a seed" not in result.stderr
    # the per-seed rows and the plots' lines keep them apart too: every run, under its row
    groups = run_groups(load_report([], s.uri))
    assert sorted(len(runs) for runs in groups.values()) == [3] * 6
    assert "rollverify (lr=2e-4, ds=auto)" in groups


def test_targets_default_to_the_newest_parent_and_accept_a_training_run(store):
    assert load_report([], store.uri).parent_run_ids == [store.sweep]
    one = store.runs["grpo"][1]
    report = load_report([one.run_id], store.uri)
    assert report.kind == "runs" and [r.run_id for r in report.runs] == [one.run_id]
    (row,) = method_rows(report.runs)
    assert row["seeds"] == 1 and row["eval_accuracy_mean"] == one.history["eval_accuracy"][STEPS]


def test_without_parents_every_training_run_is_reported(tmp_path, empty_store):
    s = Store(tmp_path, empty_store)
    s.run("grpo", 1)
    s.run("rollverify", 1, status="RUNNING")
    rows = method_rows(load_report([], s.uri).runs)
    assert [(r["method"], r["status"]) for r in rows] == [
        ("grpo", "finished"),
        ("rollverify", "unfinished"),
    ]


def test_bad_targets_are_value_errors_naming_them(store, tmp_path):
    with pytest.raises(ValueError, match=r"^0123abc: no such run in sqlite:///.*--tracking-uri"):
        load_report(["0123abc"], store.uri)
    with pytest.raises(ValueError, match="no runs here .no parent.json, mlflow.json, run folders"):
        load_report([str(tmp_path)], store.uri)
    with pytest.raises(ValueError, match="no MLflow store"):
        load_report([], f"sqlite:///{tmp_path / 'missing' / 'mlflow.db'}")
    assert not (tmp_path / "missing").exists()


def test_rows_carry_the_mean_staleness_and_mismatch_over_steps():
    runs = runs_of("grpo", GRPO) + runs_of("partial", PARTIAL)
    for run, (stale, k3) in zip(runs[3:], [(1.0, 0.001), (2.0, 0.002), (6.0, 0.006)], strict=True):
        run.history |= {"staleness_mean": {1: 0.0, 2: stale}, "mismatch_kl": {1: 0.0, 2: k3}}
    partial = by_method(method_rows(runs))["partial"]
    assert partial["staleness_mean"] == pytest.approx((0.5 + 1.0 + 3.0) / 3)
    assert partial["mismatch_kl"] == pytest.approx((0.0005 + 0.001 + 0.003) / 3)
    (point,) = [r for r in sweep_rows(runs, ["train.method"]) if r["method"] == "partial"]
    assert point["staleness_mean"] == partial["staleness_mean"]
    assert by_method(method_rows(runs))["grpo"]["staleness_mean"] is None  # never logged


def test_a_row_says_which_of_the_peers_correction_choices_its_runs_made():
    """m2po run AReaL's way is a row of its own, named so, still paired with grpo; a choice a
    method does not read (grpo masks nothing) is no choice; at the defaults, no column."""
    grpo, ours, areal = runs_of("grpo", GRPO), runs_of("m2po", GRPO), runs_of("m2po", PARTIAL)
    for run in areal:
        run.params |= {
            "correction.masked_tokens_in_count": "False",
            "correction.m2po_scope": "micro_batch",
            "correction.m2po_clip": "False",
        }
    for run in grpo:
        run.params["correction.masked_tokens_in_count"] = "False"
    rows = method_rows(grpo + ours + areal)
    areal_way = "uncounted, micro-batch, unclipped"
    assert [(r["method"], r["corrections"]) for r in rows] == [
        ("grpo", None),
        ("m2po", None),
        ("m2po", areal_way),
    ]
    assert_the_hand_computation(rows[2])
    assert "corrections" not in method_rows(grpo + ours)[0]
    (point,) = [r for r in sweep_rows(grpo + areal, ["train.method"]) if r["method"] == "m2po"]
    assert point["corrections"] == areal_way
    assert "corrections" not in sweep_rows(grpo + ours, ["train.method"])[0]
