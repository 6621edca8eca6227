"""verify.ds/dt auto (docs/rules.md, section 3, "Thresholds in drift units"): the vectors of
tests/data/auto_threshold_vectors.json through the rule and verification, the cache check that
applies and records it, and the config that accepts it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from rollverify.config import VerifyConfig
from rollverify.config.load import ConfigError, load_config
from rollverify.core.auto_thresholds import SMALLEST, per_version_drift, thresholds
from rollverify.core.methods import METHODS
from rollverify.core.switching import AcceptanceMonitor
from rollverify.core.verify import verify
from rollverify.rollout.trajectory import Trajectory
from rollverify.training.cache_check import check_cache
from rollverify.training.records import CacheCheck, step_metrics
from tests.reference import reference_kept

CASES = json.loads((Path(__file__).parent / "data/auto_threshold_vectors.json").read_text())
SPECIAL = {"inf": math.inf, "smallest": SMALLEST, "smallest_times_200": 200 * SMALLEST}


def _number(value):
    if isinstance(value, str):
        return SPECIAL[value] if value in SPECIAL else float(value)
    return value


def _batch(rows):
    width = max(len(r["ops"]) for r in rows)
    ops = torch.full((len(rows), width), math.nan, dtype=torch.float64)  # padding: never read
    versions = torch.full((len(rows), width), -1, dtype=torch.long)
    policy = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, row in enumerate(rows):
        n = len(row["ops"])
        ops[i, :n] = torch.tensor([_number(o) for o in row["ops"]], dtype=torch.float64)
        versions[i, :n] = torch.tensor(row["versions"])
        policy[i, :n] = torch.tensor(row.get("policy", [True] * n))
    return ops, versions, policy


@pytest.mark.parametrize("case", CASES["cases"], ids=lambda c: c["name"][:60])
def test_each_vector_gives_its_drift_thresholds_and_kept_lengths(case):
    ops, versions, policy = _batch(case["rows"])
    drift = per_version_drift(ops, versions, policy, case["version"])
    if case["drift"] is None:
        assert drift is None
    else:
        assert drift == pytest.approx(case["drift"], rel=1e-9, abs=0)
    ds, dt = thresholds(case["ds"], case["dt"], case["drift_versions"], drift)
    assert ds == pytest.approx(_number(case["expected_ds"]), rel=1e-9, abs=0)
    assert dt == pytest.approx(_number(case["expected_dt"]), rel=1e-9, abs=0)
    mask = versions >= 0
    assert verify(ops, versions, mask, ds, dt, policy).tolist() == case["kept"]
    for i, row in enumerate(case["rows"]):  # the literal loop agrees
        row_ops, mine = [_number(o) for o in row["ops"]], row.get("policy")
        assert reference_kept(row_ops, row["versions"], ds, dt, mine) == case["kept"][i]


def _trajectory(versions: list[int]) -> Trajectory:
    t = Trajectory(torch.tensor([1, 2]), 0, len(versions) + 4)
    for version in versions:
        t.extend([7], [-1.0], version)
    return t


def _check(trajectories, current, method="rollverify", version=3, **verify):
    cfg = VerifyConfig(**verify)
    monitor = AcceptanceMonitor(window=1, threshold=0.5)
    return check_cache(trajectories, current, METHODS[method], cfg, monitor, version, version)


def test_the_cache_check_applies_auto_thresholds_from_the_new_policys_log_probs():
    """Behavior log-probs -1; under version 3 the version-2 tokens moved by ratio 1.01 and 1.03
    (OPS 0.01, 0.03: delta 0.02, ds 0.04), the version-1 segment by 1.05 (mean 0.05: cut)."""
    old, young = _trajectory([1, 1, 2]), _trajectory([2, 2])
    log = math.log
    current = torch.tensor(
        [[-1 + log(1.05), -1 + log(1.05), -1 + log(1.01)], [-1 + log(1.03), -1 + log(1.01), 0]]
    )
    check = _check([old, young], current, ds="auto", dt="auto")
    ds, dt, drift = check.auto
    assert drift == pytest.approx((0.01 + 0.03 + 0.01) / 3, rel=1e-5)
    assert ds == pytest.approx(2 * drift) and dt == pytest.approx(400 * drift)
    assert (len(old), len(young)) == (0, 2)  # with ds 0.01 both would be cut whole
    metrics = step_metrics_of(check)
    assert (metrics["verify_ds"], metrics["verify_dt"], metrics["drift_cache"]) == check.auto


def test_the_sequence_only_ablation_keeps_no_token_stage_under_auto():
    t = _trajectory([2, 2])
    current = torch.tensor([[-1 + math.log(1.01), -1 + math.log(3.0)]])  # OPS 0.01, 2.0
    # delta 1.005, ds 2.01, dt 402: nothing is cut by either stage; the point is dt stays off
    check = _check([t], current, method="rollverify-seq", ds="auto", dt="auto")
    assert len(t) == 2 and check.tokens_cut_token_stage == 0
    t = _trajectory([2, 2])
    check = _check([t], current, method="rollverify-seq", ds="auto", dt=0.5)
    assert len(t) == 2  # dt 0.5 would cut the second token; the ablation has no token stage


def test_fixed_thresholds_record_nothing_and_auto_without_stale_tokens_neither():
    current = torch.tensor([[-1 + math.log(1.5), -1.0]])
    check = _check([_trajectory([2, 2])], current, ds=0.01, dt=2.0)
    assert check.auto is None and "verify_ds" not in step_metrics_of(check)
    fresh = _trajectory([3, 3])  # the policy's own tokens: nothing stale to measure or cut
    check = _check([fresh], current, ds="auto", dt="auto")
    assert check.auto is None and len(fresh) == 2


def test_merged_checks_weigh_their_auto_thresholds_by_trajectories():
    a = CacheCheck(trajectories=1, auto=(0.1, 20.0, 0.05))
    b = CacheCheck(trajectories=3, auto=(0.2, 40.0, 0.1))
    merged = CacheCheck.merged([a, b, CacheCheck(trajectories=5)])
    assert merged.auto == pytest.approx((0.175, 35.0, 0.0875))
    assert CacheCheck.merged([CacheCheck(trajectories=2), CacheCheck()]).auto is None


def step_metrics_of(check: CacheCheck) -> dict[str, float]:
    from rollverify.training.records import StepRecords, SyncRecord

    records = StepRecords(started=0.0, cache=check, sync=SyncRecord(seconds=0.0, gap=None))
    return step_metrics(
        records,
        verifies=True,
        monitor=AcceptanceMonitor(),
        device_seconds=0.0,
        entropy=None,
        ledger={},
    )


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [("ds", "auto", "auto"), ("dt", "auto", "auto"), ("ds", "inf", math.inf), ("ds", 0.02, 0.02)],
)
def test_the_config_takes_auto_or_a_number(tmp_path, field, value, expected):
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps({"verify": {field: value}}))
    assert getattr(load_config(path).verify, field) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"verify": {"ds": "automatic"}}', "verify.ds: must be a number or auto, got 'automatic'"),
        ('{"verify": {"dt": -1}}', "verify.dt: must be > 0 (inf allowed) or auto, got -1.0"),
        ('{"verify": {"drift_versions": 0}}', "verify.drift_versions: must be > 0, got 0"),
    ],
)
def test_a_bad_threshold_is_named_with_its_fix(tmp_path, text, message):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)


def test_a_run_with_auto_thresholds_logs_them_at_every_step_it_verified(tmp_path):
    """A real tiny run of rollverify with ds and dt auto: every step whose cache held stale
    tokens logs the thresholds it applied, at 2 and 400 times the drift it measured."""
    from rollverify.training.run import train
    from tests.runs import history, tiny

    overrides = {"train.steps": 4, "verify.ds": "auto", "verify.dt": "auto"}
    metrics = history(train(tiny(tmp_path, "rollverify", **overrides)))
    verified = {step for step, tokens in metrics["cache_tokens_verified"].items() if tokens > 0}
    assert verified and set(metrics["verify_ds"]) == verified
    for step in verified:
        drift = metrics["drift_cache"][step]
        assert drift > 0 and math.isfinite(drift)
        assert metrics["verify_ds"][step] == pytest.approx(2 * drift)
        assert metrics["verify_dt"][step] == pytest.approx(400 * drift)
