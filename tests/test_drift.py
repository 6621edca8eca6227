"""The per-version drift (rollverify/core/drift.py, metrics drift_ops and drift_k3): the token
OPS and k3 of exactly the trained tokens one version older than the policy that scores them,
logged at the steps whose batch holds such tokens and at no other."""

from __future__ import annotations

import math

import pytest
import torch

from rollverify.core.drift import version_drift
from rollverify.core.off_policy_shift import token_ops
from rollverify.experiments.seed_rows import seed_rows
from rollverify.tracking.run_records import Report, run_record


def test_only_the_tokens_one_version_old_count():
    proximal = torch.log(torch.tensor([[0.5, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5]]))
    behavior = torch.log(torch.tensor([[0.25, 0.4, 0.5, 0.1], [0.5, 0.8, 0.3, 0.5]]))
    versions = torch.tensor([[4, 4, 5, 3], [4, 2, 4, 4]])  # scored by version 5
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
    ops = token_ops(proximal, behavior, "abs_ratio", mask)
    drift_ops, k3 = version_drift(ops, proximal, behavior, versions, mask, version=5)
    # one version old and generated: (0, 0), (0, 1), (1, 0), (1, 2); r = pi / mu there
    ratios = [0.5 / 0.25, 0.5 / 0.4, 0.5 / 0.5, 0.5 / 0.3]
    assert drift_ops == pytest.approx(sum(abs(r - 1) for r in ratios) / 4)
    assert k3 == pytest.approx(sum(r - 1 - math.log(r) for r in ratios) / 4)


def test_a_batch_without_tokens_one_version_old_has_no_drift():
    proximal = behavior = torch.zeros(1, 3)
    versions, mask = torch.tensor([[5, 5, 3]]), torch.ones(1, 3, dtype=torch.bool)
    ops = token_ops(proximal, behavior, "abs_ratio", mask)
    assert all(math.isnan(v) for v in version_drift(ops, proximal, behavior, versions, mask, 5))


def test_partial_logs_the_drift_where_it_resumed_and_grpo_never(tmp_path):
    from rollverify.training.run import train
    from tests.runs import history, tiny

    summary = train(tiny(tmp_path / "partial", "partial", **{"train.steps": 4}))
    partial = history(summary)
    drifted = partial.get("drift_ops", {})
    resumed = {step for step, count in partial["resumed"].items() if count > 0}
    assert drifted and set(drifted) <= resumed
    assert all(value > 0 and math.isfinite(value) for value in drifted.values())
    assert set(partial["drift_k3"]) == set(drifted)
    # rvctl report --per-seed reads it back: the run's mean over the steps that logged it
    record = run_record(summary.tracking_uri, summary.run_id)
    (row,) = seed_rows(Report(summary.tracking_uri, "runs", [], [], [record]))
    assert row["drift_ops"] == pytest.approx(sum(drifted.values()) / len(drifted))
    grpo = history(train(tiny(tmp_path / "grpo", "grpo", **{"train.steps": 2})))
    assert "drift_ops" not in grpo and "drift_k3" not in grpo
