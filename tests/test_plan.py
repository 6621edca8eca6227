"""rvctl plan (rollverify/experiments/plan.py): from pilots' threshold grids, each point's
acceptance curve, whether it would switch, and the full run's modeled cost; on pilots whose
answers are known, and on a real pilot against report --thresholds and simulate --ds."""

from __future__ import annotations

import json
import math

import pytest

from rollverify.config import load_config
from rollverify.experiments import plan
from rollverify.experiments.simulate_settings import LengthModel, Settings
from rollverify.tracking.run_records import RunRecord
from tests.cli import run_rvctl
from tests.runs import TINY

WINDOW, SWITCH = 3, 0.5
STEPS = range(1, 9)
CHECKED = {s: (100.0 if s >= 2 else 0.0) for s in STEPS}  # step 1: nothing cached yet
LOOSE = {s: 1.0 for s in STEPS if s >= 2}  # keeps everything
MIDDLE = {2: 0.9, 3: 0.8, 4: 0.7, 5: 0.8, 6: 0.9, 7: 0.8, 8: 0.7}  # stays above the switch
TIGHT = {2: 0.6, 3: 0.4, 4: 0.3, 5: 0.3, 6: 0.3, 7: 0.3, 8: 0.3}  # falls under it at step 4


def record(seed: int = 0, **grid: dict[int, float]) -> RunRecord:
    history = {"cache_tokens_verified": CHECKED, "reward_mean": {s: 0.5 for s in STEPS}}
    history |= {f"threshold_grid/{point}": rates for point, rates in grid.items()}
    params = {"verify.window": str(WINDOW), "verify.switch_threshold": str(SWITCH)}
    params |= {"verify.ds": "0.01", "verify.dt": "2.0"}
    return RunRecord(f"r{seed}", "rollverify", seed, "FINISHED", 0, params, history)


def test_the_curve_follows_the_checks_then_holds_the_last_window():
    pilot = record(0, **{"ds_0.01": MIDDLE})
    accepted = plan.curve(pilot, "ds_0.01", until=6, steps=10)
    # step 1 (no check) takes the first check's; then each check's, to the pilot's horizon
    assert accepted[:6] == (0.9, 0.9, 0.8, 0.7, 0.8, 0.9)
    held = (0.7 + 0.8 + 0.9) / 3  # the last window of checks up to step 6
    assert accepted[6:] == pytest.approx((held,) * 4)
    assert plan.curve(pilot, "ds_0.04", until=6, steps=10) == ()  # never logged


def test_a_pilot_read_to_its_first_steps_ignores_the_rest():
    pilot = record(**{"ds_0.01": TIGHT})
    assert plan.horizon(pilot, first=5) == 5 and plan.horizon(pilot, first=None) == 8
    assert plan.replay_until(pilot, "ds_0.01", 3)["switch_step"] is None  # no full window yet
    assert plan.replay_until(pilot, "ds_0.01", 5)["switch_step"] == 4
    assert plan.last_check(pilot, 5) == 5


@pytest.fixture(scope="module")
def tiny_config():
    return load_config(overrides=TINY | {"verify.window": WINDOW, "train.steps": 12})


def pilots(*records: RunRecord) -> list[plan.Pilot]:
    lengths = LengthModel(samples=(8, 12, 20, 40, 64, 64, 16, 10))  # a long tail at 64
    return [plan.Pilot(r, lengths, prompt_tokens=12, until=8) for r in records]


def test_points_that_keep_more_cost_less_and_a_falling_one_switches(tiny_config):
    grid = {"ds_0.0025": TIGHT, "ds_0.01": MIDDLE, "ds_0.04": LOOSE}
    planned = plan.plan(pilots(record(0, **grid), record(1, **grid)), tiny_config,
                        Settings(steps=12), context=64)  # fmt: skip
    rows = {row["point"]: row for row in planned["rows"]}
    assert list(rows) == ["grpo", "partial", "ds_0.0025", "ds_0.01", "ds_0.04"]
    assert rows["ds_0.01"]["own"] and rows["ds_0.01"]["pilots"] == 2
    assert rows["grpo"]["modeled_cost_vs_grpo"] == 1.0
    loose = [r for r in planned["per_pilot"] if r["point"] == "ds_0.04"]
    assert all(r["tokens_regenerated"] == 0 for r in loose)  # it keeps every token
    assert rows["ds_0.04"]["modeled_gpu_days"] < rows["ds_0.01"]["modeled_gpu_days"]
    tight = rows["ds_0.0025"]
    assert tight["pilot_switched"] == 2 and tight["modeled_switched"] == 2
    assert tight["pilot_first_window"] == pytest.approx((0.6 + 0.4 + 0.3) / 3)
    assert rows["ds_0.01"]["modeled_switched"] == 0 and rows["ds_0.04"]["pilot_switched"] == 0
    assert plan.recommended(planned["rows"])["point"] == "ds_0.04"  # the cheapest kept up


def test_the_recommendation_is_never_a_point_that_switched():
    row = {"pilot_first_window": 0.9, "pilot_switched": 0, "modeled_switched": 0}
    rows = [
        {"point": "grpo", "modeled_gpu_days": 1.0} | row,
        {"point": "ds_0.01", "modeled_gpu_days": 0.8} | row,
        {"point": "ds_0.0025", "modeled_gpu_days": 0.5} | row | {"modeled_switched": 1},
        {"point": "ds_0.005", "modeled_gpu_days": 0.6} | row | {"pilot_switched": 1},
    ]
    assert plan.recommended(rows)["point"] == "ds_0.01"
    assert plan.recommended(rows[2:]) is None


@pytest.mark.slow
def test_a_real_pilot_plans_as_report_and_simulate_read_it(tmp_path, monkeypatch, capsys):
    """A tiny rollverify pilot: the plan's first windows are report --thresholds', and its cost
    of a point is `rvctl simulate --acceptance-from PILOT --ds X` on the pilot's lengths."""
    from rollverify.experiments.simulate_settings import prompts_of_run
    from rollverify.training.run import train
    from tests.runs import tiny

    summary = train(tiny(tmp_path, "rollverify", **{"train.steps": 6, "verify.window": 3}))
    run = str(summary.run_dir)
    planned = run_rvctl(["plan", run, "--steps", "20", "--out", str(tmp_path / "p.json"),
                         "-f", "json"], monkeypatch, capsys)  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    out = json.loads(planned.stdout)
    assert any(line.startswith("cannot predict: accuracy") for line in out["statements"])
    rows = {row["point"]: row for row in out["rows"]}
    report = run_rvctl(["report", run, "--thresholds", "-f", "json"], monkeypatch, capsys)
    for row in json.loads(report.stdout):
        first = rows[row["point"]]["pilot_first_window"]
        assert first == row["first_window"] or (first is None and row["first_window"] is None)
    assert rows["ds_0.01"]["pilot_first_window"] is not None  # a full window in 6 steps
    per_pilot = json.loads((tmp_path / "p.json").read_text())["per_pilot"]
    days = next(r["modeled_gpu_days"] for r in per_pilot if r["point"] == "ds_0.005")
    simulated = run_rvctl(["simulate", "-c", f"{run}/config.yaml", "--methods", "rollverify",
                           "--acceptance-from", run, "--ds", "0.005", "--lengths-from", run,
                           "--prompt-tokens", str(prompts_of_run(run)), "--context", "64",
                           "--steps", "20", "--workers", "1", "-f", "json"],
                          monkeypatch, capsys)  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr
    assert math.isclose(json.loads(simulated.stdout)[0]["modeled_gpu_days"], days)
    table = run_rvctl(["plan", run, "--first", "4"], monkeypatch, capsys)
    assert "recommended:" in table.stdout and "lengths from their first step 4" in table.stdout
    from rollverify.cost import trace
    from rollverify.tracking.run_records import load_report

    first4 = plan.pilot_of(load_report([run], prefixes=("threshold_grid/",)).runs[0], first=4)
    trained = trace.read(f"{run}/trace", "trainer").to_pylist()
    assert first4.lengths.samples == tuple(
        n for row in trained if row["step"] <= 4 for n in row["completions"]
    )
    for args, says in (
        (["simulate", "--ds", "0.005"], "add --acceptance-from RUN"),
        (["simulate", "--acceptance-from", run, "--ds", "0.03"], "its grid: ds_0.0025"),
        (["plan", run, "--first", "0"], "--first"),
    ):
        refused = run_rvctl(args, monkeypatch, capsys)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
