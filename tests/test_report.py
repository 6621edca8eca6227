"""rvctl report: tables from a real MLflow sqlite store, with runs logged the way training does."""

import itertools
import json
import math
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from rollverify.experiments.power import detectable_difference
from rollverify.experiments.report import (
    method_rows,
    paired_diffs,
    sweep_grid,
    sweep_rows,
    t_critical_95,
)
from rollverify.tracking.plots import plot_gaps, plot_metrics
from rollverify.tracking.run_records import RunRecord, load_report
from rvctl.app import app

T_975_DOF2 = 4.302652729911275  # Student t quantile 0.975, 2 dof (statistical tables)
STEPS = 12
EVAL_STEPS = (0, 5, 10, STEPS)


@dataclass
class Logged:
    run_id: str
    history: dict[str, dict[int, float]]  # exactly what was logged, NaN included


class Store:
    """A temporary MLflow store and a clock for distinct, increasing start times.

    Each is a copy of one empty store: creating MLflow's tables takes ~3 s.
    """

    def __init__(self, path: Path, template: Path):
        shutil.copy(template, path / "mlflow.db")
        self.uri = f"sqlite:///{path / 'mlflow.db'}"
        self.client = MlflowClient(tracking_uri=self.uri)
        self.experiment = self.client.get_experiment_by_name("rollverify").experiment_id
        self.clock = itertools.count(int(time.time() * 1000) - 10**6, 1000)
        self.rng = np.random.default_rng(0)

    def parent(self, kind, **tags):
        run = self.client.create_run(
            self.experiment, tags={"kind": kind, **tags}, start_time=next(self.clock)
        )
        return run.info.run_id

    def run(
        self,
        method,
        seed,
        *,
        parent=None,
        status="FINISHED",
        steps=STEPS,
        params=None,
        switch_at=None,
        nan_last_acceptance=False,
        cost_per_step=60.0,
    ) -> Logged:
        tags = {"method": method, "seed": str(seed), "engine": "hf"}
        if parent:
            tags["mlflow.parentRunId"] = parent
        run_id = self.client.create_run(
            self.experiment, tags=tags, start_time=next(self.clock)
        ).info.run_id
        rng, verifying = self.rng, method.startswith("rollverify")
        history: dict[str, dict[int, float]] = {"eval_accuracy": {}}
        history["eval_accuracy"][0] = rng.uniform(0.2, 0.3)
        device_seconds = 0.0
        for step in range(1, steps + 1):
            device_seconds += cost_per_step * rng.uniform(0.9, 1.1)
            values = {
                "reward_mean": 0.2 + 0.03 * step + rng.normal(0, 0.02),
                "entropy_mean": 1.5 - 0.05 * step + rng.normal(0, 0.02),
                "ops_mean": rng.uniform(0.0, 0.1),
                "staleness_mean": rng.uniform(0.0, 4.0),
                "mismatch_kl": rng.uniform(0.0, 0.01),
                "response_length_mean": rng.uniform(20, 40),
                "switched": float(switch_at is not None and step >= switch_at),
                "cost_device_seconds": device_seconds,
                "cost_gpu_days": device_seconds / 86400,
                # priced work: partial methods pay for fewer engine steps than grpo
                "modeled_gpu_days": device_seconds / 86400 / (10 if method == "grpo" else 25),
                "cost_rollout_device_seconds": 0.6 * device_seconds,
                "tokens_generated_total": 1000.0 * step,
            }
            if method == "partial":  # as a peer correction logs what it masked (no rng draw)
                values["trl/correction/token_share"] = 0.01 * step
            if verifying:
                values["acceptance_rate"] = 1.0 - 0.05 * step + rng.normal(0, 0.01)
                if nan_last_acceptance and step == steps:
                    values["acceptance_rate"] = math.nan
            if step in EVAL_STEPS:
                values["eval_accuracy"] = min(1.0, 0.25 + 0.03 * step + rng.normal(0, 0.03))
            for name, value in values.items():
                history.setdefault(name, {})[step] = value
        metrics = [
            Metric(name, float(value), 1_700_000_000_000 + step, step)
            for name, points in history.items()
            for step, value in points.items()
        ]
        params = {"train.method": method, "train.steps": str(steps), **(params or {})}
        self.client.log_batch(
            run_id, metrics=metrics, params=[Param(k, str(v)) for k, v in params.items()]
        )
        if status != "RUNNING":
            self.client.set_terminated(run_id, status=status)
        return Logged(run_id, history)


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("empty") / "mlflow.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{path}")
    client.create_experiment("rollverify", artifact_location=path.parent.as_uri())
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory, empty_store):
    """A compare (4 methods, finished and unfinished runs), then a ds x dt sweep."""
    s = Store(tmp_path_factory.mktemp("report"), empty_store)
    s.compare = s.parent("compare", methods="partial,grpo,rollverify,ops-filter", seeds="3")
    runs = {"partial": [s.run("partial", 1, parent=s.compare, cost_per_step=40)]}  # first: order
    runs["grpo"] = [s.run("grpo", seed, parent=s.compare) for seed in (1, 2, 3)]
    runs["rollverify"] = [
        s.run("rollverify", 1, parent=s.compare, switch_at=7, cost_per_step=30),
        s.run("rollverify", 2, parent=s.compare, switch_at=9, cost_per_step=30,
              nan_last_acceptance=True),
        s.run("rollverify", 3, parent=s.compare, cost_per_step=30),
    ]  # fmt: skip
    s.killed = s.run(
        "rollverify", 4, parent=s.compare, status="KILLED", steps=3, switch_at=2, cost_per_step=900
    )
    s.unfinished = [
        s.run("ops-filter", 1, parent=s.compare, status="RUNNING", steps=4),
        s.run("ops-filter", 2, parent=s.compare, status="FAILED", steps=2),
    ]
    s.client.set_terminated(s.compare, "FINISHED")
    s.runs = runs

    s.sweep = s.parent("sweep", sweep_params="verify.ds,verify.dt", method="rollverify")
    s.points = {}
    for ds, dt, seeds in [("0.01", "2.0", 2), ("0.01", "inf", 1), ("0.1", "2.0", 1)]:
        for seed in range(1, seeds + 1):
            params = {"verify.ds": ds, "verify.dt": dt}
            logged = s.run("rollverify", seed, parent=s.sweep, params=params, steps=5)
            s.points.setdefault((ds, dt), []).append(logged)
    failed = {"verify.ds": "0.1", "verify.dt": "inf"}
    s.run("rollverify", 1, parent=s.sweep, status="FAILED", params=failed)
    return s


def last(points: dict[int, float]) -> float:
    """The value at the largest step that is not NaN (computed here, apart from the library)."""
    return [v for _, v in sorted(points.items()) if not math.isnan(v)][-1]


def by_method(rows):
    return {row["method"]: row for row in rows}


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
    assert rv["gpu_days"] == pytest.approx(days["rollverify"])
    assert rv["speedup_vs_grpo"] == pytest.approx(days["grpo"] / days["rollverify"])
    assert partial["speedup_vs_grpo"] == pytest.approx(days["grpo"] / days["partial"])
    assert grpo["speedup_vs_grpo"] == pytest.approx(1.0)
    assert rv["speedup_vs_grpo"] > 1.5  # logged at half grpo's cost per step
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
    assert rows["rollverify"]["gpu_days"] < killed_days / 5
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
    assert first["gpu_days"] == pytest.approx(np.mean(days))
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
    assert row["gpu_days"] == pytest.approx(statistics.mean(days))
    args = ["report", sweep, "--tracking-uri", s.uri, "--format", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [r["duplicates"] for r in json.loads(result.stdout)] == [1]
    assert "note: 1 finished run(s) repeat a seed their row already counts" in result.stderr


def test_a_seed_finished_twice_pairs_with_grpo_once():
    runs = runs_of("grpo", GRPO) + runs_of("partial", PARTIAL)
    runs += [record("grpo", 0, 0.0, 9.0, 9.0), record("partial", 1, 0.0, 9.0, 9.0)]  # later
    rows = by_method(method_rows(runs))
    assert_the_hand_computation(rows["partial"])
    assert rows["partial"]["seeds"] == 3 and rows["partial"]["duplicates"] == 1


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
    with pytest.raises(ValueError, match="no parent.json or mlflow.json here"):
        load_report([str(tmp_path)], store.uri)
    with pytest.raises(ValueError, match="no MLflow store"):
        load_report([], f"sqlite:///{tmp_path / 'missing' / 'mlflow.db'}")
    assert not (tmp_path / "missing").exists()


def test_t_quantile_matches_the_tables():
    assert t_critical_95(2) == pytest.approx(T_975_DOF2, rel=1e-9)
    assert t_critical_95(10) == pytest.approx(2.228138851986274, rel=1e-9)


# ---- differences to grpo, paired by seed (hand-built records) ----------------------------

PAIRED_COLUMNS = [
    "pairs",
    "auc_diff_vs_grpo",
    "auc_diff_ci95",
    "auc_mde80",
    "accuracy_diff_vs_grpo",
    "accuracy_diff_ci95",
    "accuracy_mde80",
    "gpu_days_diff_vs_grpo",
    "gpu_days_diff_ci95",
    "modeled_gpu_days_diff_vs_grpo",
    "modeled_gpu_days_diff_ci95",
]


def record(method, seed, accuracy, gpu_days, modeled, status="FINISHED") -> RunRecord:
    history = {
        "eval_accuracy": {0: 0.2, STEPS: accuracy},
        "cost_gpu_days": {STEPS: gpu_days},
        "modeled_gpu_days": {STEPS: modeled},
    }
    params = {"train.method": method, "train.seed": str(seed)}
    return RunRecord(f"{method}-{seed}", method, seed, status, 0, params, history)


# seed: (accuracy, gpu_days, modeled_gpu_days)
GRPO = {0: (0.5, 2.0, 0.20), 1: (0.6, 2.4, 0.30), 2: (0.7, 1.8, 0.25)}
PARTIAL = {0: (0.6, 1.0, 0.10), 1: (0.8, 1.6, 0.20), 2: (0.75, 1.1, 0.15)}


def runs_of(method, seeds: dict, status="FINISHED") -> list[RunRecord]:
    return [record(method, seed, *values, status=status) for seed, values in seeds.items()]


def assert_the_hand_computation(row):
    """PARTIAL - GRPO per seed, computed here apart from the library."""
    assert row["pairs"] == 3
    accuracy = [0.6 - 0.5, 0.8 - 0.6, 0.75 - 0.7]  # [0.1, 0.2, 0.05]
    mean = (0.1 + 0.2 + 0.05) / 3
    sd = math.sqrt(((0.1 - mean) ** 2 + (0.2 - mean) ** 2 + (0.05 - mean) ** 2) / 2)
    assert row["accuracy_diff_vs_grpo"] == pytest.approx(statistics.fmean(accuracy))
    assert row["accuracy_diff_vs_grpo"] == pytest.approx(0.116666667)
    assert row["accuracy_diff_ci95"] == pytest.approx(4.302652729911275 * sd / math.sqrt(3))
    assert row["accuracy_diff_ci95"] == pytest.approx(0.18972915, rel=1e-6)
    # each curve is (0, 0.2) -> (STEPS, accuracy): its area is the mean of the two ends
    assert row["auc_diff_vs_grpo"] == pytest.approx(statistics.fmean(accuracy) / 2)
    assert row["auc_diff_ci95"] == pytest.approx(row["accuracy_diff_ci95"] / 2)
    assert row["accuracy_mde80"] == pytest.approx(detectable_difference(sd, 3))
    assert row["auc_mde80"] == pytest.approx(detectable_difference(sd / 2, 3))
    days_mean = (-1.0 - 0.8 - 0.7) / 3
    days_sd = math.sqrt(((-1.0 - days_mean) ** 2 + (-0.8 - days_mean) ** 2
                         + (-0.7 - days_mean) ** 2) / 2)  # fmt: skip
    assert row["gpu_days_diff_vs_grpo"] == pytest.approx(days_mean)
    assert row["gpu_days_diff_ci95"] == pytest.approx(T_975_DOF2 * days_sd / math.sqrt(3))
    # the same -0.1 on every seed: a paired interval of zero width (an unpaired one, over
    # each side's 0.05 spread, would be +-0.12)
    assert row["modeled_gpu_days_diff_vs_grpo"] == pytest.approx(-0.1)
    assert row["modeled_gpu_days_diff_ci95"] == pytest.approx(0.0, abs=1e-12)


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
    assert row["accuracy_diff_ci95"] is None and row["gpu_days_diff_ci95"] is None
    assert row["accuracy_mde80"] is None and row["auc_mde80"] is None
    assert row["modeled_gpu_days_diff_ci95"] is None
    none = paired_diffs(runs_of("partial", PARTIAL), [])  # no grpo run
    assert none["pairs"] == 0 and all(none[k] is None for k in PAIRED_COLUMNS[1:])


def test_unfinished_runs_are_not_paired():
    runs = runs_of("grpo", GRPO) + runs_of("partial", PARTIAL)
    runs += [record("grpo", 3, 0.1, 1.0, 1.0, status="KILLED"), record("partial", 3, 0.9, 5, 5)]
    runs += [record("grpo", 4, 0.1, 1.0, 1.0), record("partial", 4, 0.9, 5, 5, status="RUNNING")]
    assert_the_hand_computation(by_method(method_rows(runs))["partial"])


def test_plots_skip_metrics_no_run_logged(store, tmp_path):
    report = load_report([store.compare], store.uri)
    grpo_only = {"grpo": [r for r in report.runs if r.method == "grpo"]}
    paths = plot_metrics(grpo_only, tmp_path)
    assert {p.stem for p in paths} == {
        "reward_mean", "entropy_mean", "ops_mean", "response_length_mean", "eval_accuracy"
    }  # fmt: skip
    assert all(p.stat().st_size > 1000 for p in paths)


# ---- the command line, as a user runs it -------------------------------------------------


def test_cli_json_from_a_compare_folder(store, tmp_path, monkeypatch):
    folder = tmp_path / "compare-20250101-000000"
    folder.mkdir()
    record = {"kind": "compare", "run_id": store.compare, "tracking_uri": store.uri}
    (folder / "parent.json").write_text(json.dumps(record))
    monkeypatch.chdir(tmp_path)  # no ./runs here: the store must come from parent.json
    result = CliRunner().invoke(app, ["report", str(folder), "--format", "json"])
    assert result.exit_code == 0, result.output

    def no_nan(constant):
        raise AssertionError(f"{constant} in json output")

    rows = json.loads(result.stdout, parse_constant=no_nan)
    assert [r["method"] for r in rows] == ["grpo", "partial", "rollverify", "ops-filter"]
    assert rows[3]["eval_accuracy_mean"] is None and rows[1]["eval_accuracy_ci95"] is None

    # seeds 1-3 paired with grpo's (the KILLED seed 4 is not); partial ran seed 1 only
    grpo, partial, rv = (by_method(rows)[m] for m in ("grpo", "partial", "rollverify"))
    logged = {m: {seed: h.history["eval_accuracy"][STEPS] for seed, h in enumerate(runs, 1)}
              for m, runs in store.runs.items()}  # fmt: skip
    diffs = [logged["rollverify"][seed] - logged["grpo"][seed] for seed in (1, 2, 3)]
    assert rv["pairs"] == 3 and rv["accuracy_diff_vs_grpo"] == pytest.approx(np.mean(diffs))
    ci = T_975_DOF2 * statistics.stdev(diffs) / math.sqrt(3)
    assert rv["accuracy_diff_ci95"] == pytest.approx(ci, rel=1e-6)
    assert rv["gpu_days_diff_vs_grpo"] < 0 and rv["modeled_gpu_days_diff_ci95"] is not None
    assert partial["pairs"] == 1 and partial["accuracy_diff_vs_grpo"] is not None
    assert partial["accuracy_diff_ci95"] is None and grpo["pairs"] is None


@pytest.mark.parametrize("format", ["json", "csv", "md"])
def test_every_format_carries_the_paired_columns(store, format):
    args = ["report", store.compare, "--tracking-uri", store.uri, "--format", format]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    if format == "json":
        columns = list(json.loads(result.stdout)[0])
        partial = by_method(json.loads(result.stdout))["partial"]
    else:
        lines = result.stdout.splitlines()
        split = (lambda line: line.split(",")) if format == "csv" else (
            lambda line: [c.strip() for c in line.strip("|").split("|")])  # fmt: skip
        columns = split(lines[0])
        body = [dict(zip(columns, split(line), strict=True)) for line in lines[1:]]
        partial = next(r for r in body if r["method"] == "partial")
    assert columns[-len(PAIRED_COLUMNS) :] == PAIRED_COLUMNS
    # one pair: a difference, no interval (json null, csv empty, md "-"), and the count
    assert partial["accuracy_diff_ci95"] == {"json": None, "csv": "", "md": "-"}[format]
    assert str(partial["pairs"]) == "1" and partial["accuracy_diff_vs_grpo"] not in (None, "", "-")


def test_cli_sweep_table_with_grids_and_plots(store, tmp_path):
    plots = tmp_path / "plots"
    args = ["report", store.sweep, "--tracking-uri", store.uri, "--plots", str(plots)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "acc, ds x dt" in result.stdout and "device-days, ds x dt" in result.stdout
    assert "dt=inf" in result.stdout and "…" not in result.stdout  # fits 80 columns
    pngs = sorted(plots.glob("*.png"))
    assert {p.stem for p in pngs} == {
        "reward_mean", "entropy_mean", "ops_mean", "acceptance_rate", "response_length_mean",
        "eval_accuracy",
    }  # fmt: skip
    assert all(p.stat().st_size > 1000 for p in pngs)
    assert all(f"wrote {p}" in result.stderr for p in pngs)


def test_cli_wide_method_table_fits_80_columns(store):
    result = CliRunner().invoke(
        app, ["report", store.compare, "--tracking-uri", store.uri, "--wide"]
    )
    assert result.exit_code == 0, result.output
    assert "rollverify" in result.stdout and "…" not in result.stdout  # nothing cut
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert "speedup" in result.stdout and "switch@" in result.stdout  # the split tables


def test_the_table_carries_the_paired_columns_and_says_when_too_few_pairs(store):
    result = CliRunner().invoke(
        app, ["report", store.compare, "--tracking-uri", store.uri, "--wide"]
    )
    assert result.exit_code == 0, result.output
    for header in ("pairs", "Δacc", "±Δacc", "Δdevice-days", "±Δdevice", "ΔGPU-days*", "±ΔGPU*"):
        assert header in result.stdout
    partial = [line for line in result.stdout.splitlines() if line.startswith("│ partial")]
    assert "".join(partial).count("n<3") == 4  # one pair: no interval, and the table says why
    assert "n<3: under 3 pairs" in result.stderr  # the legend


def test_cli_bad_target_is_one_line_exit_2(tmp_path):
    missing = tmp_path / "compare-missing"
    result = subprocess.run(
        [sys.executable, "-m", "rvctl.app", "report", str(missing)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == (
        f"error: {missing}: no such folder; pass a run id, a run folder or a compare/sweep folder"
    )
    # A user error: its one line, no hint to read a traceback (nothing unexpected happened).
    assert len(lines) == 1 and result.stdout == ""


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


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_per_seed_rows_are_each_finished_runs_own_figures(store, tmp_path, suffix):
    """`--per-seed FILE`: one row per finished run, its own figures, from which the table's
    means are computed; the unfinished runs (KILLED, RUNNING, FAILED) are not rows."""
    path = tmp_path / f"seeds{suffix}"
    args = ["report", store.compare, "--tracking-uri", store.uri, "--per-seed", str(path)]
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    if suffix == ".json":
        rows = json.loads(path.read_text())
    else:
        import csv

        rows = list(csv.DictReader(path.open()))
    finished = {(m, i + 1): h for m, runs in store.runs.items() for i, h in enumerate(runs)}
    assert {(r["method"], int(r["seed"])) for r in rows} == set(finished)
    table = by_method(json.loads(result.stdout))
    for method in ("grpo", "rollverify"):
        mine = [r for r in rows if r["method"] == method]
        logged = [finished[(method, int(r["seed"]))].history["eval_accuracy"] for r in mine]
        assert [float(r["eval_accuracy"]) for r in mine] == [h[max(h)] for h in logged]
        area = statistics.fmean(float(r["eval_auc"]) for r in mine)
        assert area == pytest.approx(table[method]["eval_auc_mean"])
    # how often a correction acted: the mean over steps of what it logged; none logged, none
    (partial,) = [r for r in rows if r["method"] == "partial"]
    logged = finished[("partial", 1)].history["trl/correction/token_share"]
    assert float(partial["correction_token_share"]) == pytest.approx(
        statistics.fmean(logged.values())
    )
    assert all(r["correction_token_share"] in (None, "") for r in rows if r["method"] == "grpo")


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


def test_every_split_of_the_table_names_a_rows_correction_choices(tmp_path, empty_store):
    """The table, split to fit, repeats the choices beside the method in each part: two m2po
    rows, ours and AReaL's way, stay apart; the legend says what each label means."""
    s = Store(tmp_path, empty_store)
    areal = {
        "correction.masked_tokens_in_count": "False",
        "correction.m2po_scope": "micro_batch",
        "correction.m2po_clip": "False",
    }
    for seed in (1, 2):
        s.run("m2po", seed)
        s.run("m2po", seed, params=areal)
    result = CliRunner().invoke(app, ["report", "--tracking-uri", s.uri, "--wide"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("│ m2po")]
    labelled = [line for line in rows if "uncounted, micro-batch, unclipped" in line]
    assert len(labelled) >= 2 and len(rows) == 2 * len(labelled)  # one of each per part
    assert "uncounted: masked tokens out of the loss's count" in result.stderr
