"""rvctl report --thresholds (rollverify/experiments/thresholds.py) on runs whose answers are
known: each grid point's acceptance per check replayed as switching counts it."""

from __future__ import annotations

import json

import pytest

from rollverify.experiments import thresholds
from rollverify.tracking.run_records import RunRecord
from tests.cli import run_rvctl

WINDOW, SWITCH = 3, 0.5
CHECKED = {1: 100.0, 2: 100.0, 3: 200.0, 4: 100.0, 5: 100.0, 6: 100.0}
LOOSE = {step: 0.9 for step in CHECKED}  # ds_0.04: never near the threshold
TIGHT = {1: 0.7, 2: 0.6, 3: 0.5, 4: 0.4, 5: 0.3, 6: 0.6}  # ds_0.005: falls, then recovers


def run(seed: int, tight: dict[int, float] = TIGHT) -> RunRecord:
    history = {
        "cache_tokens_verified": CHECKED,
        "threshold_grid/ds_0.04": LOOSE,
        "threshold_grid/ds_0.005": tight,
        "threshold_grid/auto_c2": {step: 0.8 for step in CHECKED},
    }
    params = {"verify.window": str(WINDOW), "verify.switch_threshold": str(SWITCH)}
    params |= {"verify.ds": "0.005", "verify.dt": "2.0", "train.seed": str(seed)}
    return RunRecord(f"r{seed}", "rollverify", seed, "FINISHED", 0, params, history)


def test_each_point_is_replayed_as_switching_counts_it():
    rows = {row["point"]: row for row in thresholds.rows([run(0)])}
    assert list(rows) == ["ds_0.005", "ds_0.04", "auto_c2"]  # ds ascending, then auto
    tight = rows["ds_0.005"]
    assert tight["own"] and not rows["ds_0.04"]["own"]
    assert tight["first_window"] == pytest.approx((0.7 + 0.6 + 0.5) / 3)
    windows = [(0.7 + 0.6 + 0.5) / 3, (0.6 + 0.5 + 0.4) / 3, (0.5 + 0.4 + 0.3) / 3]
    windows.append((0.4 + 0.3 + 0.6) / 3)
    assert tight["lowest_window"] == pytest.approx(min(windows))
    assert tight["switch_steps"] == [5]  # the first full window under 0.5 (not 0.5) ends at 5
    cut = sum((1 - TIGHT[s]) * CHECKED[s] for s in CHECKED) / sum(CHECKED.values())
    assert tight["regenerated"] == pytest.approx(cut)  # weighted by the tokens checked
    assert rows["ds_0.04"]["switch_steps"] == [None] and rows["ds_0.04"]["switched"] == 0


def test_the_window_at_85_percent_of_the_steps_is_set_against_the_first():
    """Question (a) of the paper's regime: the full window ending at the last check at or
    before 85% of the run's steps (step 5 of 6), below the first full window or not."""
    six = run(0)
    six.params["train.steps"] = "6"
    rows = {row["point"]: row for row in thresholds.rows([six])}
    tight, loose = rows["ds_0.005"], rows["ds_0.04"]
    assert tight["late_window"] == pytest.approx((0.5 + 0.4 + 0.3) / 3)  # ends at step 5
    assert tight["declined"] == 1 and tight["late_runs"] == 1
    assert loose["late_window"] == pytest.approx(0.9) and loose["declined"] == 0
    # a run of 20 steps whose checks stopped at 6 (it switched): no window at step 17
    switched = run(1)
    switched.params["train.steps"] = "20"
    rows = {row["point"]: row for row in thresholds.rows([switched])}
    assert rows["ds_0.005"]["late_window"] is None and rows["ds_0.005"]["late_runs"] == 0


def test_over_seeds_the_figures_are_means_with_intervals():
    later = {step: rate + 0.1 for step, rate in TIGHT.items()}  # stays at 0.5 and above
    rows = {row["point"]: row for row in thresholds.rows([run(0), run(1, later), run(2)])}
    tight = rows["ds_0.005"]
    assert tight["runs"] == 3 and tight["switched"] == 2 and tight["switch_step_median"] == 5
    assert tight["first_window_ci95"] is not None


def test_the_command_prints_writes_and_draws_it(tmp_path, empty_store, monkeypatch, capsys):
    from tests.report_store import Store

    store = Store(tmp_path, empty_store)
    for seed in range(2):
        extra = {name: values for name, values in run(seed).history.items()}
        store.run("rollverify", seed, params=run(seed).params, extra=extra)
    args = [
        "report",
        "--tracking-uri",
        store.uri,
        "--thresholds",
        "--out",
        str(tmp_path / "t.json"),
    ]
    result = run_rvctl([*args, "-f", "md", "--plots", str(tmp_path)], monkeypatch, capsys)
    assert result.returncode == 0, result.stderr
    assert "| ds_0.005 (the run's) |" in result.stdout
    assert (tmp_path / "thresholds.png").is_file()
    written = json.loads((tmp_path / "t.json").read_text())["rows"]
    assert [row["point"] for row in written] == ["ds_0.005", "ds_0.04", "auto_c2"]
    grpo_only = run_rvctl(["report", "--tracking-uri", store.uri, "--thresholds", "--vs", "grpo"],
                          monkeypatch, capsys)  # fmt: skip
    assert grpo_only.returncode == 2 and "one table at a time" in grpo_only.stderr


def test_runs_at_two_settings_of_their_own_are_pooled_and_the_command_says_so(
    tmp_path, empty_store, monkeypatch, capsys
):
    """Given the paper's and auto runs together (issue 77's question (a)), each row pools
    both, both rows are marked the run's, and a note says so and how to see one alone."""
    from tests.report_store import Store

    store = Store(tmp_path, empty_store)
    logged = []
    for seed, ds in [(0, "0.005"), (1, "auto")]:
        params = run(seed).params | {"verify.ds": ds, "verify.dt": "2.0" if ds != "auto" else ds}
        logged.append(store.run("rollverify", seed, params=params, extra=dict(run(seed).history)))
    args = ["report", "--tracking-uri", store.uri, "--thresholds", "-f", "md"]
    both = run_rvctl(args, monkeypatch, capsys)
    assert both.returncode == 0, both.stderr
    assert "| ds_0.005 (the run's) |" in both.stdout and "| auto_c2 (the run's) |" in both.stdout
    assert "2 threshold settings of their own (auto_c2, ds_0.005); each row pools" in both.stderr
    one = run_rvctl([*args[:3], logged[0].run_id, *args[3:]], monkeypatch, capsys)
    assert one.returncode == 0, one.stderr
    assert "pools" not in one.stderr
