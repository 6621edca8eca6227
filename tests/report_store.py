"""rvctl report's tests' store: a temporary MLflow sqlite store with runs logged the way
training does (Store), and what the tests read of them. Its fixtures (empty_store, store) are
tests/conftest.py's."""

import itertools
import math
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from rollverify.experiments.power import detectable_difference
from rollverify.tracking.run_records import RunRecord

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
        extra=None,
    ) -> Logged:
        """`extra`: {metric: {step: value}} logged beside the rest (no draw from the rng)."""
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
                # under the name older runs logged it (run_records reads it where the new is absent)
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
        for name, points in (extra or {}).items():
            history.setdefault(name, {}).update(points)
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


def last(points: dict[int, float]) -> float:
    """The value at the largest step that is not NaN (computed here, apart from the library)."""
    return [v for _, v in sorted(points.items()) if not math.isnan(v)][-1]


def by_method(rows):
    return {row["method"]: row for row in rows}


# ---- hand-built records, for the differences to grpo ----

# ---- differences to grpo, paired by seed (hand-built records) ----------------------------

PAIRED_COLUMNS = [
    "pairs",
    "auc_diff_vs_grpo",
    "auc_diff_ci95",
    "auc_mde80",
    "accuracy_diff_vs_grpo",
    "accuracy_diff_ci95",
    "accuracy_mde80",
    "device_days_diff_vs_grpo",
    "device_days_diff_ci95",
    "modeled_gpu_days_diff_vs_grpo",
    "modeled_gpu_days_diff_ci95",
]


def record(method, seed, accuracy, gpu_days, modeled, status="FINISHED") -> RunRecord:
    history = {
        "eval_accuracy": {0: 0.2, STEPS: accuracy},
        "cost_device_days": {STEPS: gpu_days},
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
    assert row["device_days_diff_vs_grpo"] == pytest.approx(days_mean)
    assert row["device_days_diff_ci95"] == pytest.approx(T_975_DOF2 * days_sd / math.sqrt(3))
    # the same -0.1 on every seed: a paired interval of zero width (an unpaired one, over
    # each side's 0.05 spread, would be +-0.12)
    assert row["modeled_gpu_days_diff_vs_grpo"] == pytest.approx(-0.1)
    assert row["modeled_gpu_days_diff_ci95"] == pytest.approx(0.0, abs=1e-12)


def make_empty_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("empty") / "mlflow.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{path}")
    client.create_experiment("rollverify", artifact_location=path.parent.as_uri())
    return path


def make_store(tmp_path_factory, empty_store):
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
