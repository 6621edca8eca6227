"""rvctl simulate (rollverify/experiments/simulate.py): the real schedules on the virtual clock,
and the properties its cost table must have whatever the constants."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rollverify.config import load_config
from rollverify.experiments.simulate import simulate
from rollverify.experiments.simulate_results import rows
from rollverify.experiments.simulate_settings import (
    LengthModel,
    Settings,
    acceptance_of_run,
    lengths_of_run,
    medians_of_run,
)
from rollverify.training.run import train
from tests.cli import run_rvctl
from tests.runs import history, tiny

SMALL = {"rollout.slots": 64, "rollout.batch_groups": 8, "rollout.group_size": 8}
RVCTL = [sys.executable, "-m", "rvctl.app"]


def table(overrides=None, methods=("grpo", "partial"), **settings) -> dict[str, dict]:
    config = load_config(overrides=SMALL | (overrides or {}))
    defaults = {"contexts": (4096,), "steps": 15}
    results = simulate(config, Settings(methods=methods, **(defaults | settings)))
    return {row["method"]: row for row in rows(results)}


def test_more_slots_are_never_slower():
    days = [
        table({"rollout.slots": slots})["partial"]["modeled_gpu_days"] for slots in (32, 64, 128)
    ]
    assert days[0] >= days[1] >= days[2]


def test_a_heavier_tail_never_lowers_partial_rollouts_speedup():
    """Same median, larger sigma, a budget far from binding. (A binding budget caps the tail:
    then sync rollout's steps stop growing while the tokens do, measured here.)"""
    speedups = [
        table(contexts=(65536,), lengths=LengthModel(median=300, sigma=sigma))["partial"][
            "modeled_speedup_vs_grpo"
        ]
        for sigma in (0.2, 0.6, 1.0)
    ]
    assert speedups[0] < speedups[1] < speedups[2]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "reference"])
def test_acceptance_one_and_zero_bound_rollverify_between_partial_and_grpo(compiled):
    """On both engines: each counts the tokens generated again after a truncation its own way
    (the kernel; Sketch.generate)."""
    methods = ("grpo", "partial", "rollverify")
    keep_all = table(methods=methods, acceptance=(1.0,), compiled=compiled)
    assert keep_all["rollverify"]["tokens_generated"] == keep_all["partial"]["tokens_generated"]
    assert keep_all["rollverify"]["tokens_regenerated"] == 0
    assert (
        keep_all["rollverify"]["modeled_gpu_days"] > keep_all["partial"]["modeled_gpu_days"]
    )  # + verifying
    keep_none = table(methods=methods, acceptance=(0.0,), compiled=compiled)
    rv = keep_none["rollverify"]
    assert rv["switch_step"] == load_config().verify.window + 1  # the window's 8 cycles
    assert rv["tokens_regenerated"] > 0
    low, high = sorted(
        (keep_none["partial"]["modeled_gpu_days"], keep_none["grpo"]["modeled_gpu_days"])
    )
    assert low < keep_all["rollverify"]["modeled_gpu_days"] <= rv["modeled_gpu_days"] < high


def test_partial_rollout_keeps_the_slots_busy_and_grpo_waits_for_stragglers():
    result = table()
    assert result["partial"]["slot_utilization"] > 0.9 > 0.5 > result["grpo"]["slot_utilization"]
    assert result["partial"]["modeled_speedup_vs_grpo"] > 1.0
    assert result["grpo"]["modeled_speedup_vs_grpo"] == 1.0
    assert 0 < result["grpo"]["rollout_share"] <= 1


@pytest.mark.slow
def test_lengths_can_come_from_a_runs_trace(tmp_path):
    summary = train(tiny(tmp_path, "partial"))
    model = lengths_of_run(summary.run_dir)
    assert len(model.samples) == 3 * 2 * 2  # 3 steps of B x G completions
    sampler = model.sampler(group_size=2, budget=64, seed=0)
    assert {sampler(g, i) for g in range(50) for i in range(2)} <= set(model.samples)


@pytest.mark.slow
def test_the_cli_prints_the_cost_table_and_refuses_bad_input(monkeypatch, capsys):
    command = [*RVCTL, "simulate", "--steps", "3", "--context", "512,1024", "-f", "json"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(result.stdout)
    assert [(r["method"], r["context"]) for r in rows] == [
        (m, c) for c in (512, 1024) for m in ("grpo", "partial", "rollverify")
    ]
    expected = {"method", "context", "gpu", "modeled_gpu_days", "modeled_speedup_vs_grpo"}
    expected |= {"rollout_share"}
    expected |= {"slot_utilization", "tokens_generated", "tokens_regenerated", "switch_step"}
    expected |= {"truncated_share", "preemptions", "tokens_recomputed", "staleness_max"}
    expected |= {"tool_calls"}
    assert set(rows[0]) == expected
    # stderr is a pipe here (a job's log): a plain line per simulation, as it finishes
    logged = [line for line in result.stderr.splitlines() if line.startswith("simulate ")]
    assert [line.split(":")[0] for line in logged] == [f"simulate {i}/6" for i in range(1, 7)]
    # (two processes by default here: the lines come as the runs finish, in any order)
    assert all(line.endswith("GPU-days") for line in logged)
    assert sorted(line.split(": ", 1)[1].split(":")[0] for line in logged) == sorted(
        f"{m} @ {c}" for c in (512, 1024) for m in ("grpo", "partial", "rollverify")
    )
    for bad, message in [
        (["--context", "8k"], "--context: '8k' is not a comma-separated list of numbers"),
        (["--methods", "grpo,nope"], "--methods: unknown nope"),
        (["--gpu", "v100"], "--gpu: 'v100' is not one of a100, h100, h200, b200"),
        (["--acceptance", "1.5"], "--acceptance: must be in [0, 1]"),
    ]:
        result = run_rvctl(["simulate", *bad], monkeypatch, capsys)  # (in this process)
        assert result.returncode == 2 and "Traceback" not in result.stderr, bad
        assert message in result.stderr, (bad, result.stderr)


def test_the_table_names_its_setting_and_reads_at_100_columns(monkeypatch, capsys):
    """What a user reads: the setting in the title, one table at 100 columns, counts with
    separators, each shown column explained under its shown name, a verdict per method."""
    monkeypatch.setenv("COLUMNS", "100")
    args = ["simulate", "-c", "experiments/qwen3-8b-dapo-math.yaml", "--steps", "3"]
    result = run_rvctl([*args, "--context", "2048"], monkeypatch, capsys)
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "continued" not in out and all(len(line) <= 100 for line in result.stdout.splitlines())
    assert (
        "Qwen/Qwen3-8B-Base, 3 steps of 128 x 8, on 8 h100s: 4 engines x 1 GPU + 4 trainer" in out
    )
    assert "KV-cache limit on (preemption); lengths lognormal(median 1500, sigma 0.9)" in out
    assert re.search(r"│ partial\s+│ 2,048 │", result.stdout)
    assert re.search(r"partial at 2,048: \d\.\d\dx grpo's GPU-days \(\d+\.\d% (saved|more)\)", out)
    header_line = re.search(r"┃ method (.*)┃", result.stdout).group(1)
    headers = [h.strip() for h in header_line.split("┃") if h.strip()]
    legend = " ".join(result.stderr.split())
    assert all(f"{header}: " in legend for header in headers), (headers, legend)
    no_limit = run_rvctl([*args, "--context", "2048", "--no-kv-cache"], monkeypatch, capsys)
    assert "KV-cache limit off" in " ".join(no_limit.stdout.split())
    wide = run_rvctl([*args, "--context", "2048", "--wide"], monkeypatch, capsys)
    assert re.search(r"┃\s+tokens ┃", wide.stdout) and re.search(r"\d,\d{3},\d{3}", wide.stdout)


@pytest.mark.slow
def test_runs_in_parallel_processes_give_the_same_results_in_the_same_order():
    config = load_config(overrides=SMALL)
    settings = Settings(("grpo", "partial"), (1024, 2048), steps=4, asyncs=(1,))
    seen = []
    parallel = simulate(config, settings, on_result=seen.append, workers=2)
    assert parallel == simulate(config, settings)
    assert [(r.method, r.context) for r in parallel] == [
        (m, c) for c in (1024, 2048) for m in ("grpo", "partial", "async-eta1")
    ]
    assert sorted(map(id, seen)) == sorted(map(id, parallel))  # each reported once, as it came


@pytest.mark.parametrize("method", ["grpo", "partial"])
def test_exact_and_fast_event_modes_agree(method):
    exact = table(methods=(method,), finishes_per_poll=1)[method]["modeled_gpu_days"]
    fast = table(methods=(method,), finishes_per_poll=8)[method]["modeled_gpu_days"]
    assert fast == pytest.approx(exact, rel=0.1)


@pytest.mark.slow
def test_acceptance_can_follow_a_runs_curve_and_switches_where_the_run_did(tmp_path):
    """A run whose acceptance collapses (as in test_switching): the simulator fed its measured
    curve, with the run's window, switches at the run's step."""
    switching = {"train.learning_rate": 0.05, "verify.window": 2, "verify.ds": 1e-3}
    summary = train(tiny(tmp_path, "rollverify", **{"train.steps": 4} | switching))
    assert summary.switch_step is not None
    logged = history(summary)["acceptance_rate"]
    curve = acceptance_of_run(summary.run_dir)
    assert curve == tuple(logged[step] for step in range(1, max(logged) + 1))

    config = load_config(overrides=SMALL | {"verify.window": 2})

    def switch_step(acceptance: tuple[float, ...]) -> int | None:
        settings = Settings(("rollverify",), (4096,), steps=6, acceptance=acceptance)
        return simulate(config, settings)[0].switch_step

    assert switch_step(curve) == summary.switch_step
    # step by step, the last value repeating: the window (2) mean falls below 0.5 at step 5
    assert switch_step((1.0, 1.0, 1.0, 0.0)) == 5

    command = [*RVCTL, "simulate", "--steps", "2", "--acceptance-from", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--acceptance-from" in result.stderr and "no summary.json" in result.stderr


def test_resumed_trajectories_are_prefilled_again():
    """Partial rollout's cache is stale after the weight sync: each resume recomputes prompt +
    generated tokens, a cost grpo never pays."""
    config = load_config(overrides=SMALL)
    grpo, partial = simulate(config, Settings(("grpo", "partial"), (4096,), steps=15))
    assert partial.prefill_seconds > 3 * grpo.prefill_seconds > 0
    assert partial.prefill_seconds < partial.seconds["rollout"]


# -- lengths that move, and the budget that cuts them ---------------------------------------------


def test_the_median_moves_from_start_to_end_linearly_or_geometrically():
    linear = LengthModel(median=1000, end_median=4000)
    log = LengthModel(median=1000, end_median=4000, growth="log")
    assert [linear.median_at(s, 7) for s in (1, 4, 7, 9)] == [1000, 2500, 4000, 4000]
    assert [round(log.median_at(s, 7), 6) for s in (1, 4, 7)] == [1000, 2000, 4000]
    assert LengthModel(median=1000).median_at(7, 7) == 1000  # no end: constant
    curve = LengthModel(medians=(100.0, 200.0, 400.0))
    assert [curve.median_at(s, 700) for s in (1, 2, 3, 700)] == [100, 200, 400, 400]


def test_each_steps_draws_have_that_steps_median_and_keep_their_length():
    model = LengthModel(median=500, sigma=0.5, end_median=4000, growth="log")
    sampler = model.sampler(group_size=8, budget=10**6, seed=0, steps=4)
    first = {(g, i): sampler(g, i) for g in range(400) for i in range(8)}
    for step, median, groups in [(2, 1000, range(400, 800)), (4, 4000, range(800, 1200))]:
        sampler.step = step  # 500 x 8 ** (1/3) per step
        drawn = [sampler(g, i) for g in groups for i in range(8)]
        assert abs(np.median(drawn) / median - 1) < 0.05
    assert abs(np.median(list(first.values())) / 500 - 1) < 0.05
    assert all(sampler(g, i) == n for (g, i), n in first.items())  # resumed: the same length


def test_the_budget_cuts_lengths_and_the_table_counts_them():
    model = LengthModel(median=1000, sigma=0.9)
    sampler = model.sampler(group_size=8, budget=1000, seed=0)
    drawn = [sampler(g, i) for g in range(200) for i in range(8)]
    assert max(drawn) == 1000 and abs(drawn.count(1000) / len(drawn) - 0.5) < 0.05
    tight = table(contexts=(1024,), lengths=model)["grpo"]["truncated_share"]
    loose = table(contexts=(65536,), lengths=model)["grpo"]["truncated_share"]
    assert loose < 0.01 and abs(tight - 0.5) < 0.1


def test_growing_lengths_cost_more_and_hit_the_budget_more_often():
    flat = table(contexts=(4096,), lengths=LengthModel(median=800))
    grown = table(contexts=(4096,), lengths=LengthModel(median=800, end_median=3200))
    for method in ("grpo", "partial"):
        assert grown[method]["tokens_generated"] > 1.5 * flat[method]["tokens_generated"]
        assert grown[method]["modeled_gpu_days"] > flat[method]["modeled_gpu_days"]
        assert grown[method]["truncated_share"] > flat[method]["truncated_share"]


def test_the_default_length_model_reproduces_the_tables_before_lengths_could_move():
    """The numbers `table()` gave before the length model could move (commit 24c5b3d), exactly;
    an end median equal to the start median is the same model."""
    before = {
        "grpo": (0.0028671551199465893, 1737385, 0),
        "partial": (0.001409384773163142, 1853365, 0),
        "rollverify": (0.0014512948133689643, 1909750, 56464),
    }
    methods = ("grpo", "partial", "rollverify")
    for lengths in (LengthModel(), LengthModel(end_median=1500.0, growth="log")):
        now = table(methods=methods, lengths=lengths)
        assert {
            m: (r["modeled_gpu_days"], r["tokens_generated"], r["tokens_regenerated"])
            for m, r in now.items()
        } == before


def test_bad_length_growth_is_one_line_and_exit_2(monkeypatch, capsys):
    for bad, message in [
        (["--growth", "cubic"], "--growth: 'cubic' is not one of linear, log"),
        (["--end-median", "0"], "--end-median: must be > 0"),
    ]:
        result = run_rvctl(["simulate", "--steps", "1", *bad], monkeypatch, capsys)
        assert result.returncode == 2 and "Traceback" not in result.stderr, bad
        assert message in result.stderr, (bad, result.stderr)


@pytest.mark.slow
def test_the_median_can_follow_a_runs_trace_step_by_step(tmp_path):
    summary = train(tiny(tmp_path, "partial"))
    medians = medians_of_run(summary.run_dir)
    from rollverify.cost import trace

    table_ = trace.read(Path(summary.run_dir) / "trace", "trainer")
    expected = [float(np.median(n)) for n in table_.column("completions").to_pylist()]
    assert list(medians) == expected and len(medians) == 3
    model = LengthModel(medians=medians)
    assert model.moves and model.median_at(99, 700) == medians[-1]
