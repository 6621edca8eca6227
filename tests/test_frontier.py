"""The cost-accuracy frontier (rollverify/experiments/frontier.py, `rvctl report --frontier`):
each point's cost is its runs' modeled GPU-days over their baseline twins' and its gain the
paired ΔAUC, both seed by seed with 95% intervals, and the Pareto set is the points nothing
else beats on both axes (the baseline's own (1, 0) among them)."""

from __future__ import annotations

import json
import math

import pytest

from rollverify.experiments.frontier import frontier_rows, label, on_pareto
from rollverify.experiments.power import t_critical_95
from rollverify.experiments.vs_baseline import parse_vs
from rollverify.tracking.run_records import RunRecord


def run(method, seed, auc, days, **params) -> RunRecord:
    """A finished run with a flat evaluation curve at `auc` and `days` modeled GPU-days."""
    history = {"eval_accuracy": {0: auc, 10: auc}, "modeled_gpu_days": {10: days}}
    flat = {"train.method": method, "train.seed": str(seed)}
    flat |= {k.replace("__", "."): str(v) for k, v in params.items()}
    return RunRecord(f"{method}-{seed}-{auc}", method, seed, "FINISHED", 0, flat, history)


GRPO_FIGURES = [(0, 0.5, 1.0), (1, 0.6, 2.0), (2, 0.7, 4.0)]  # (seed, AUC, modeled GPU-days)
GRPO = [run("grpo", s, a, d) for s, a, d in GRPO_FIGURES]


def points(*runs, vs="grpo", by=()) -> dict:
    return {p["point"]: p for p in frontier_rows([*GRPO, *runs], parse_vs(vs), by)}


def test_cost_and_gain_pair_each_run_with_its_seeds_baseline_run():
    # stored in seed order 2, 0, 1: pairing by position would give other ratios and gains
    opsm = [run("opsm", s, a, d) for s, a, d in [(2, 0.68, 2.4), (0, 0.49, 0.4), (1, 0.60, 1.0)]]
    (point,) = points(*opsm).values()
    ratios = [0.4 / 1.0, 1.0 / 2.0, 2.4 / 4.0]  # seeds 0, 1, 2: 0.4, 0.5, 0.6
    spread = math.sqrt(sum((r - 0.5) ** 2 for r in ratios) / 2)
    assert (point["cost"], point["pairs"]) == (pytest.approx(0.5), 3)
    assert point["cost_ci95"] == pytest.approx(t_critical_95(2) * spread / math.sqrt(3))
    assert point["auc_vs_base"] == pytest.approx((-0.01 + 0.0 - 0.02) / 3)


def test_the_pareto_set_is_what_nothing_beats_on_both_axes():
    partial = [
        run("partial", s, a - 0.05, d / 2) for s, a, d in [(0, 0.5, 1), (1, 0.6, 2), (2, 0.7, 4)]
    ]
    tis = [run("tis", s, a, d / 2) for s, a, d in [(0, 0.5, 1), (1, 0.6, 2), (2, 0.7, 4)]]
    dearer = [
        run("rollverify", s, a + 0.02, d * 1.1)
        for s, a, d in [(0, 0.5, 1), (1, 0.6, 2), (2, 0.7, 4)]
    ]
    worse = [
        run("mis", s, a - 0.01, d * 1.2) for s, a, d in [(0, 0.5, 1), (1, 0.6, 2), (2, 0.7, 4)]
    ]
    found = points(*partial, *tis, *dearer, *worse)
    assert found["tis"]["cost"] == pytest.approx(0.5) and found["tis"]["pareto"] is True
    assert found["partial"]["pareto"] is False  # tis: as cheap, more AUC
    assert found["rollverify"]["pareto"] is True  # dearer than grpo, but the only gain
    assert found["mis"]["pareto"] is False  # grpo's own point: cheaper and better
    (alone,) = points(*worse).values()  # no other point beats it: the baseline's own does
    assert alone["pareto"] is False


def test_a_point_without_a_cost_or_a_pair_is_not_placed():
    assert on_pareto({"cost": None, "auc_vs_base": 0.1}, []) is None
    unpaired = [run("partial", 7, 0.5, 1.0)]  # a seed grpo has no run of
    (point,) = points(*unpaired).values()
    assert (point["cost"], point["auc_vs_base"], point["pareto"]) == (None, None, None)


def test_a_synchronous_point_is_not_labelled_with_an_eta():
    sync = run("partial", 0, 0.5, 1.0, rollout__mode="sync", rollout__eta=1)
    stale = run("partial", 0, 0.5, 1.0, rollout__mode="async", rollout__eta=8)
    assert label("partial", {"rollout.eta": "1"}, sync) == "partial"
    assert label("partial", {"rollout.eta": "8"}, stale) == "partial, eta=8"


def test_the_command_prints_writes_and_draws_the_frontier(study_store, rvctl, tmp_path):
    out = tmp_path / "frontier.json"
    options = ["--frontier", "--by", "rollout.mode", "--plots", str(tmp_path), "-f", "json"]
    result = rvctl("report", "--tracking-uri", study_store.uri, *options, "--out", str(out))
    assert result.returncode == 0, result.stderr
    shown, written = json.loads(result.stdout), json.loads(out.read_text())
    assert written == {"vs": "grpo", "points": shown} and (tmp_path / "frontier.png").is_file()
    by_point = {p["point"]: p for p in shown}
    # grpo's async runs differ in eta (and order): each async point's twin is at its eta
    assert {p["baseline"] for p in shown} == {
        "train.method=grpo, rollout.mode=sync",
        "train.method=grpo, rollout.mode=async, rollout.batch_order=None, rollout.eta=0",
        "train.method=grpo, rollout.mode=async, rollout.batch_order=None, rollout.eta=8",
    }
    assert all(p["pairs"] == p["seeds"] for p in by_point.values())
    table = rvctl("report", "--tracking-uri", study_store.uri, "--frontier", "--vs", "partial")
    assert table.returncode == 0 and "Pareto" in table.stdout


def test_the_frontier_and_a_study_table_are_one_at_a_time(study_store, rvctl):
    result = rvctl("report", "--tracking-uri", study_store.uri, "--frontier", "--table",
                   "composition")  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --frontier and --table composition: one table at a time; drop one of them"
    ]


def test_compare_refuses_a_frontier_that_would_make_its_json_two_documents(rvctl, tmp_path):
    result = rvctl("compare", "grpo", "partial", "--frontier", "-f", "json", "--output",
                   str(tmp_path))  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "error: --frontier: a second table after the report, not one json document; run "
        "rvctl report FOLDER --frontier -f json after the comparison instead"
    ]
    assert not list(tmp_path.iterdir())  # nothing started


def test_a_setting_set_beside_a_sweep_makes_its_own_point():
    """rollverify at ds=auto (a study's --set) and at ds=0.01 are two points, each against
    grpo; partial, whose runs share one ds, is not named by it."""
    # each sweep writes to its own folder, and grpo's is the first's: not a setting
    fixed = [run("rollverify", s, 0.5 + s / 10, 1.0, verify__ds=0.01) for s in range(3)]
    auto = [
        run("rollverify", s, 0.52 + s / 10, 0.5, verify__ds="auto", output="b") for s in range(3)
    ]
    partial = [run("partial", s, 0.45 + s / 10, 0.3, verify__ds="0.010") for s in range(3)]
    found = points(*fixed, *auto, *partial)
    assert set(found) == {"rollverify, ds=0.01", "rollverify, ds=auto", "partial"}
    assert found["rollverify, ds=auto"]["auc_vs_base"] == pytest.approx(0.02)
    assert found["rollverify, ds=0.01"]["auc_vs_base"] == pytest.approx(0.0)
    assert found["rollverify, ds=auto"]["cost"] == pytest.approx((0.5 + 0.25 + 0.125) / 3)


def test_a_committed_seed_row_stands_in_with_its_auc_final_accuracy_and_cost():
    """benchmarks/frontier_seed_rows.py: the frontier of per-seed rows whose store is gone."""
    from benchmarks.frontier_seed_rows import record, settings
    from rollverify.experiments.run_figures import eval_area

    row = {"group": "ds=0.05, dt=2.0, method=rollverify", "method": "rollverify", "seed": "3",
           "run_id": "r", "eval_auc": "0.81", "eval_accuracy": "0.9",
           "modeled_gpu_days": "2e-4"}  # fmt: skip
    stand_in = record(row)
    assert eval_area(stand_in) == pytest.approx(0.81) and stand_in.last("eval_accuracy") == 0.9
    assert stand_in.last("modeled_gpu_days") == 2e-4 and stand_in.seed == 3
    assert stand_in.params["verify.ds"] == "0.05" and stand_in.params["rollout.mode"] == "sync"
    assert settings("method=opsm, eta=8")["rollout.mode"] == "async"
    assert "rollout.eta" not in settings("method=grpo, eta=1")  # the old label of a sync run


def test_two_pairs_give_a_mean_cost_without_an_interval():
    """As the paired differences: under three pairs an interval is of no use."""
    two = [run("opsm", s, a, d) for s, a, d in [(0, 0.5, 0.5), (1, 0.6, 1.0)]]
    (point,) = points(*two).values()
    assert point["cost"] == pytest.approx(0.5) and point["pairs"] == 2
    assert point["cost_ci95"] is None and point["auc_vs_base_ci95"] is None


def test_committed_rows_beside_stored_runs_differ_only_in_what_their_labels_say(tmp_path):
    """benchmarks/frontier_seed_rows.py --runs: the stand-ins take a stored run's config, so
    that against opsm (no stored opsm run) rollverify's rows at ds 0.05 and its stored runs at
    ds auto are two points, grpo's rows and its stored reruns one, and no label lists the keys
    a row does not carry."""
    from benchmarks.frontier_seed_rows import DEFAULTS, records, template_of

    full = DEFAULTS | {"model.path": "m", "rollout.mode": "sync", "train.steps": "200"}
    stored = [run("grpo", s, a, d, **full) for s, a, d in GRPO_FIGURES]
    stored += [
        run("rollverify", s, 0.52 + s / 10, 0.5, **full | {"verify.ds": "auto"}) for s in range(3)
    ]
    rows = [{"group": f"method={m}", "method": m, "seed": s, "run_id": f"{m}{s}", "eval_auc": a,
             "eval_accuracy": a, "modeled_gpu_days": d}
            for m, a, d in [("opsm", 0.5, 0.3), ("grpo", 0.5, 1.0)] for s in range(3)]  # fmt: skip
    rows += [{"group": "ds=0.05, method=rollverify", "method": "rollverify", "seed": s,
              "run_id": f"r{s}", "eval_auc": 0.6, "eval_accuracy": 0.6, "modeled_gpu_days": 0.6}
             for s in range(3)]  # fmt: skip
    (tmp_path / "rows_seeds.json").write_text(json.dumps(rows))
    stand_ins = records([tmp_path / "rows_seeds.json"], {}, template_of(stored, "opsm"))
    found = {p["point"]: p for p in frontier_rows(stand_ins + stored, parse_vs("opsm"))}
    assert set(found) == {"grpo", "rollverify, ds=0.05", "rollverify, ds=auto"}
    assert found["grpo"]["seeds"] == 3 and found["rollverify, ds=auto"]["cost"] == pytest.approx(
        0.5 / 0.3
    )


def test_the_pareto_set_is_drawn_against_each_points_own_baseline():
    """grpo at two learning rates: a point at one is not beaten by a point at the other."""
    lr = {"train__learning_rate": "1"}
    grpo_small = [run("grpo", s, a, d, **lr) for s, a, d in GRPO_FIGURES]
    grpo = [run("grpo", s, a, d, train__learning_rate="2") for s, a, d in GRPO_FIGURES]
    cheap = [
        run("partial", s, a, d, **lr) for s, a, d in [(0, 0.5, 0.2), (1, 0.6, 0.4), (2, 0.7, 0.8)]
    ]
    dear = [run("partial", s, a, d, train__learning_rate="2")
            for s, a, d in [(0, 0.49, 0.5), (1, 0.59, 1.0), (2, 0.69, 2.0)]]  # fmt: skip
    found = {
        p["point"]: p
        for p in frontier_rows([*grpo_small, *grpo, *cheap, *dear], by=("train.learning_rate",))
    }
    assert found["partial, learning_rate=2"]["pareto"] is True  # cheaper than its grpo's (1, 0)
    assert found["partial, learning_rate=1"]["pareto"] is True
