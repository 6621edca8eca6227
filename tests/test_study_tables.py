"""The staleness study's tables (rollverify/experiments/vs_baseline.py, dose_response.py,
composition.py; `rvctl report --vs/--by/--table`): every difference pairs runs of the same seed,
a run without its twin is left out, synchronous runs stay apart from the asynchronous
dose-response, and a chosen baseline is the run it names. Over a logged store, the command
writes what the study's scripts wrote before they moved into the library, byte for byte."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rollverify.experiments import composition, dose_response, vs_baseline
from rollverify.experiments.power import paired_difference
from rollverify.tracking.run_records import RunRecord

GOLDEN = Path(__file__).parent / "data" / "study_tables"


def run(method, seed, accuracy, status="FINISHED", **params) -> RunRecord:
    """A run whose evaluation curve is flat at `accuracy` (so its AUC is `accuracy`)."""
    history = {"eval_accuracy": {0: accuracy, 200: accuracy}}
    flat = {"train.method": method, "train.seed": str(seed)} | {
        key.replace("__", "."): str(value) for key, value in params.items()
    }
    return RunRecord(f"{method}-{seed}-{len(flat)}", method, seed, status, 0, flat, history)


def dose(method, eta, seed, accuracy, status="FINISHED", **params):
    return run(method, seed, accuracy, status, rollout__mode="async", rollout__eta=eta, **params)


def test_the_dose_response_pairs_each_eta_with_eta_0_seed_by_seed():
    # eta 0 in seed order, eta 8 in another order: pairing by position would differ
    runs = [dose("grpo", 0, s, a) for s, a in [(0, 0.90), (1, 0.80), (2, 0.70)]]
    runs += [dose("grpo", 8, s, a) for s, a in [(2, 0.60), (0, 0.85), (1, 0.70)]]
    runs.append(dose("grpo", 8, 3, 0.10))  # no eta-0 twin: not paired
    (eta0, eta8) = dose_response.rows(runs)
    assert (eta0["eta"], eta8["eta"], eta8["seeds"]) == (0, 8, 4)
    assert eta0["auc_vs_eta0"] is None
    # seed by seed: 0.85 - 0.90, 0.70 - 0.80, 0.60 - 0.70 (a mean alone cannot tell a wrong
    # pairing: with every seed paired it is the difference of the means; the interval can)
    by_seed = paired_difference([-0.05, -0.10, -0.10])
    assert eta8["auc_vs_eta0"] == pytest.approx(by_seed[0])
    assert eta8["auc_vs_eta0_ci95"] == pytest.approx(by_seed[1])
    assert eta8["auc"] == pytest.approx((0.60 + 0.85 + 0.70 + 0.10) / 4)


def test_sync_grpo_is_the_reference_not_a_dose():
    sync = [
        run("grpo", s, a, rollout__mode="sync", rollout__eta=0) for s, a in [(0, 0.9), (1, 0.8)]
    ]
    runs = sync + [dose("grpo", 0, 1, 0.7), dose("grpo", 0, 0, 0.9), dose("grpo", 0, 2, 0.5)]
    (row,) = dose_response.rows(runs)
    assert row["seeds"] == 3  # the sync runs are not eta 0's
    # (0.9 - 0.9 + 0.7 - 0.8) / 2: seed 2 has no sync run
    assert row["auc_vs_grpo"] == pytest.approx(-0.05)


def test_unfinished_runs_and_second_runs_of_a_seed_do_not_count():
    runs = [dose("grpo", 0, 0, 0.5), dose("grpo", 0, 0, 0.9), dose("grpo", 0, 1, 0.1, "RUNNING")]
    (row,) = dose_response.rows(runs)
    assert (row["seeds"], row["auc"]) == (1, 0.5)


def test_the_composition_pairs_a_control_with_its_twin_by_seed():
    grpo = [run("grpo", s, a, rollout__mode="sync") for s, a in [(0, 0.9), (1, 0.8), (2, 0.7)]]
    completion = [dose("grpo", 8, s, a) for s, a in [(1, 0.6), (0, 0.7), (2, 0.5)]]
    start = [
        dose("grpo", 8, s, a, rollout__batch_order="start")
        for s, a in [(2, 0.6), (0, 0.6), (1, 0.6)]
    ]
    by_name = {row["run"]: row for row in composition.rows(grpo + completion + start)}
    row = by_name["grpo, async eta=8, start order"]
    assert row["twin"] == "grpo, async eta=8"
    vs_twin = paired_difference([-0.1, 0.0, 0.1])  # seeds 0, 1, 2
    assert (row["auc_vs_twin"], row["auc_vs_twin_ci95"]) == pytest.approx(vs_twin[:2])
    assert row["auc_vs_grpo"] == pytest.approx((-0.3 - 0.2 - 0.1) / 3)
    assert by_name["grpo, async eta=8"]["auc_vs_grpo"] == pytest.approx((-0.2 - 0.2 - 0.2) / 3)
    assert "auc_vs_twin" not in by_name["grpo, async eta=8"]


def test_each_method_pairs_with_its_own_run_at_the_baselines_values():
    """--vs verify.dt=2: rollverify at dt 0.2 against rollverify at dt 2 (not another method's
    dt-2 run of that seed), seed by seed; '2.0' as MLflow stores it is the value 2."""
    at_2 = [run("rollverify", s, a, verify__dt="2.0") for s, a in [(0, 0.9), (1, 0.8), (2, 0.7)]]
    others = [run("partial", s, 0.1, verify__dt="2.0") for s in range(3)]  # first in the store
    at_02 = [run("rollverify", s, a, verify__dt="0.2") for s, a in [(2, 0.9), (0, 0.8), (1, 0.8)]]
    (row,) = vs_baseline.rows(others + at_2 + at_02, vs_baseline.parse_vs("verify.dt=2"))
    assert (row["method"], row["values"], row["paired_seeds"]) == (
        "rollverify",
        {"verify.dt": "0.2"},
        3,
    )
    by_seed = paired_difference([-0.1, 0.0, 0.2])  # seeds 0, 1, 2
    assert (row["auc_vs_base"], row["auc_vs_base_ci95"]) == pytest.approx(by_seed[:2])


def test_a_method_baseline_pairs_every_other_method_with_it():
    partial = [run("partial", s, a) for s, a in [(0, 0.5), (1, 0.6)]]
    tis = [run("tis", s, a) for s, a in [(1, 0.7), (0, 0.7), (2, 0.9)]]  # seed 2: no partial
    (row,) = vs_baseline.rows(partial + tis, vs_baseline.parse_vs("train.method=partial"))
    assert (row["method"], row["seeds"], row["paired_seeds"]) == ("tis", 3, 2)
    assert row["auc_vs_base"] == pytest.approx((0.2 + 0.1) / 2)
    with pytest.raises(ValueError, match="--vs"):
        vs_baseline.parse_vs("verify.dt")


def test_by_keeps_the_groups_value_in_its_baseline():
    """--vs train.method=grpo --by rollout.eta: opsm at eta 8 against grpo at eta 8, not at
    eta 0 (the first grpo run of its seed in the store); rows in ascending eta."""
    grpo0 = [dose("grpo", 0, s, 0.9) for s in range(2)]
    grpo8 = [dose("grpo", 8, s, a) for s, a in [(1, 0.5), (0, 0.6)]]
    opsm = [dose("opsm", e, s, 0.7) for e in (8, 0) for s in range(2)]
    rows = vs_baseline.rows(
        grpo0 + grpo8 + opsm, vs_baseline.parse_vs("train.method=grpo"), ("rollout.eta",)
    )
    assert [(r["method"], r["values"]) for r in rows] == [
        ("opsm", {"rollout.eta": "0"}),
        ("opsm", {"rollout.eta": "8"}),
    ]
    assert rows[1]["baseline"] == "train.method=grpo, rollout.eta=8"
    assert rows[1]["auc_vs_base"] == pytest.approx((0.1 + 0.2) / 2)
    assert rows[0]["auc_vs_base"] == pytest.approx(-0.2)


# ---- the command over a logged store --------------------------------------------------------

TABLES = {  # golden file -> rvctl report's options that print it
    "vs_partial": ["--vs", "train.method=partial"],
    "vs_dt2": ["--vs", "verify.dt=2"],
    "vs_grpo_by_eta": ["--vs", "train.method=grpo", "--by", "rollout.eta"],
    "dose_response": ["--table", "dose-response"],
    "composition": ["--table", "composition"],
}


@pytest.mark.parametrize("name", TABLES)
def test_the_command_writes_the_study_scripts_tables_byte_for_byte(
    name, study_store, rvctl, tmp_path
):
    """tests/data/study_tables/: the md table and --out JSON that benchmarks/stale_paired.py,
    stale_dose_response.py and stale_composition.py made of this store (commit 3f0d147); the
    --vs tables since groups are told apart by every setting their runs differ in, each
    paired with the baseline's runs like it where those differ (grpo at its eta, sync with
    sync), not with the first run of its seed: remade then."""
    out = tmp_path / f"{name}.json"
    result = rvctl("report", "--tracking-uri", study_store.uri, *TABLES[name], "-f", "md",
                   "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == (GOLDEN / f"{name}.md").read_text()
    assert out.read_bytes() == (GOLDEN / f"{name}.json").read_bytes()


def test_the_machine_formats_carry_every_row(study_store, rvctl):
    as_json = rvctl(
        "report", "--tracking-uri", study_store.uri, "--vs", "verify.dt=2", "-f", "json"
    )
    rows = json.loads(as_json.stdout)
    assert rows == json.loads((GOLDEN / "vs_dt2.json").read_text())["rows"]
    as_csv = rvctl("report", "--tracking-uri", study_store.uri, "--vs", "verify.dt=2", "-f", "csv")
    columns, *lines = list(csv.reader(as_csv.stdout.splitlines()))
    assert columns[:2] == ["method", "verify.dt"] and "seeds" in columns
    assert len(lines) == len(rows) and all(len(line) == len(columns) for line in lines)
    table = rvctl("report", "--tracking-uri", study_store.uri, "--table", "dose-response")
    assert table.returncode == 0 and "rollverify" in table.stdout


def test_the_dose_response_draws_a_chart_per_figure(study_store, rvctl, tmp_path):
    result = rvctl("report", "--tracking-uri", study_store.uri, "--table", "dose-response",
                   "--plots", str(tmp_path))  # fmt: skip
    charts = {path.name for path in tmp_path.glob("*.png")}
    assert result.returncode == 0 and {"auc_vs_eta.png", "auc_vs_eta0.png"} <= charts
    assert len(charts) == len(dose_response.PLOTTED) + len(dose_response.PAIRED)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--vs", "verify.dt"], "--vs: 'verify.dt' is not METHOD or KEY=VALUE"),
        (["--by", "rollout.eta"], "--by: keeps values in the baseline of --vs"),
        (["--vs", "verify.dt=2", "--table", "composition"], "--vs and --table composition"),
        (["--out", "x.json"], "--out: writes a --vs or --table table"),
        (["--table", "doses"], "'doses' is not one of"),
    ],
)
def test_a_bad_study_option_is_one_line_and_exit_2(options, named, study_store, rvctl, tmp_path):
    result = rvctl("report", "--tracking-uri", study_store.uri, *options)
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and named in line, line
