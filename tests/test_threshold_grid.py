"""Counterfactual acceptance (rollverify/core/threshold_grid.py): at a check, each grid point's
acceptance is verify() with that point's thresholds on the same cache, exactly; and a run logs
it at every check, its own thresholds' point equal to its own acceptance rate."""

from __future__ import annotations

import math

import pytest
import torch

from rollverify.core.auto_thresholds import PAPER_DT_PER_DS, per_version_drift
from rollverify.core.threshold_grid import (
    DEFAULT_GRID,
    grid_kept,
    grid_thresholds,
    parse_point,
)
from rollverify.core.verify import verify


def cache(seed: int, rows: int = 64, width: int = 48):
    """A cache-shaped batch: right-padded rows of 1-4 version segments, OPS spread over the
    grid's range (a few tokens far off, as a token stage sees them), some tool tokens."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (rows,), generator=generator)
    mask = torch.arange(width) < lengths[:, None]
    ops = torch.rand(rows, width, generator=generator) ** 3 * 0.12
    ops[torch.rand(rows, width, generator=generator) < 0.01] = 3.0  # a token stage's
    ops[torch.rand(rows, width, generator=generator) < 0.005] = math.nan  # unscorable: fails
    ops[~mask] = math.nan  # padding is never read
    cuts = torch.randint(0, width, (rows, 3), generator=generator).sort(-1).values
    versions = 7 + (torch.arange(width)[None, :, None] >= cuts[:, None, :]).sum(-1)
    policy = mask & (torch.rand(rows, width, generator=generator) > 0.05)
    return ops, versions, mask, policy


@pytest.mark.parametrize("seed", range(5))
def test_each_point_keeps_what_verify_with_its_thresholds_keeps(seed):
    ops, versions, mask, policy = cache(seed)
    drift = per_version_drift(ops, versions, policy, version=11)
    run_dt = 2.0
    kept = grid_kept(ops, versions, mask, policy, DEFAULT_GRID, run_dt, drift)
    columns = torch.arange(mask.shape[1])
    expected = {}
    for point in DEFAULT_GRID:
        label, ds = parse_point(point)
        if ds is None:  # auto:c: ds = c x drift, its dt scaled as auto scales it
            c = float(str(point).split(":")[1])
            pairs = {
                label: (c * drift, PAPER_DT_PER_DS * c * drift),
                f"{label}_dt_run": (c * drift, run_dt),
            }
        else:
            pairs = {label: (ds, run_dt), f"{label}_dt_scaled": (ds, PAPER_DT_PER_DS * ds)}
        for name, (point_ds, point_dt) in pairs.items():
            lengths = verify(ops, versions, mask, point_ds, point_dt, policy)
            expected[name] = int((policy & (columns < lengths[:, None])).sum())
    assert kept == expected
    rates = [kept[f"ds_{ds:g}"] / int(policy.sum()) for ds in (0.0025, 0.01, 0.04, 0.08)]
    assert rates == sorted(rates) and rates[0] < rates[-1], "a looser ds keeps more here"
    assert kept["ds_0.01_dt_scaled"] == kept["ds_0.01"]  # scaled: 0.01 x 2/0.01 = 2, the run's
    assert kept["ds_0.0025_dt_scaled"] <= kept["ds_0.0025"]  # dt 0.5 cuts more than dt 2


def test_an_auto_point_without_a_stale_token_has_no_threshold():
    thresholds = grid_thresholds(["auto:2", 0.01], run_dt=2.0, drift=None)
    assert thresholds["auto_c2"] == (math.inf, math.inf)
    assert thresholds["auto_c2_dt_run"] == (math.inf, 2.0)
    assert thresholds["ds_0.01_dt_scaled"] == (0.01, pytest.approx(2.0))


@pytest.mark.parametrize("bad", [0, -0.01, "auto", "auto:0", "auto:x", "0.01", True])
def test_a_bad_point_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="grid point|auto:C"):
        parse_point(bad)


@pytest.mark.slow
def test_a_run_logs_the_grid_at_every_check_its_own_point_its_own_acceptance(tmp_path):
    """A tiny rollverify run at ds 0.01, dt 2: threshold_grid/ds_0.01 (the run's dt) is its
    acceptance_rate at every step that checked a cache; every point is a rate."""
    from rollverify.training.run import train
    from tests.runs import metric_history, tiny

    config = tiny(tmp_path, "rollverify", **{"train.steps": 4})
    summary = train(config)
    history = metric_history(summary.tracking_uri, summary.run_id)
    accepted = history["acceptance_rate"]
    checked = {step for step, value in accepted.items() if not math.isnan(value)}
    assert checked, "the run checked a cache"
    own = history["threshold_grid/ds_0.01"]
    assert {step: own[step] for step in checked} == {step: accepted[step] for step in checked}
    labels = [name for name in history if name.startswith("threshold_grid/")]
    assert len(labels) == 2 * len(DEFAULT_GRID)
    assert all(0 <= v <= 1 for name in labels for v in history[name].values())
