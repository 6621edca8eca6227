"""`rvctl report` as a command: its formats, the wide table split to fit, plots, per-seed
files, bad targets (runs logged in a real MLflow store, tests/report_store.py)."""

import json
import math
import statistics
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from rollverify.tracking.plots import plot_metrics
from rollverify.tracking.run_records import load_report
from rvctl.app import app
from tests.report_store import (
    PAIRED_COLUMNS,
    STEPS,
    T_975_DOF2,
    Store,
    by_method,
)


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
    assert rv["device_days_diff_vs_grpo"] < 0 and rv["modeled_gpu_days_diff_ci95"] is not None
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
        f"error: {missing}: no such folder; pass a run id, a run folder, a compare/sweep folder "
        "or an output folder"
    )
    # A user error: its one line, no hint to read a traceback (nothing unexpected happened).
    assert len(lines) == 1 and result.stdout == ""


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


def test_plots_draw_the_thresholds_each_curve_is_read_against():
    from rollverify.tracking.plots import _mixes_partial, references
    from rollverify.tracking.run_records import RunRecord

    def run(method: str, **params: str) -> RunRecord:
        return RunRecord(method, method, 0, "FINISHED", 0, params, {})

    groups = {
        "grpo": [run("grpo", **{"verify.ds": "0.5", "verify.switch_threshold": "0.9"})],
        "rollverify": [
            run("rollverify", **{"verify.ds": "0.01", "verify.switch_threshold": "0.5"})
        ],
        "auto": [run("rollverify", **{"verify.ds": "auto", "verify.switch_threshold": "0.5"})],
    }  # grpo's config carries thresholds it never applies: not drawn
    assert references(groups, "acceptance_rate") == [(0.5, "switch threshold 0.5")]
    assert references(groups, "ops_mean") == [(0.01, "ds 0.01")]
    assert references(groups, "reward_mean") == []
    assert _mixes_partial(groups) and not _mixes_partial({"grpo": groups["grpo"]})


def test_cli_plots_the_metrics_asked_for(store, tmp_path, monkeypatch, capsys):
    from tests.cli import run_rvctl

    args = ["report", store.compare, "--tracking-uri", store.uri, "--plots", str(tmp_path)]
    drawn = run_rvctl([*args, "--metrics", "reward_mean,entropy_mean"], monkeypatch, capsys)
    assert drawn.returncode == 0, drawn.stderr
    assert {p.name for p in tmp_path.glob("*.png")} == {"reward_mean.png", "entropy_mean.png"}
    alone = run_rvctl(["report", store.compare, "--tracking-uri", store.uri, "--metrics",
                       "reward_mean"], monkeypatch, capsys)  # fmt: skip
    assert alone.returncode == 2 and "add --plots DIR" in alone.stderr
