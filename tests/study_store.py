"""The staleness study's runs in miniature, logged to a real MLflow store the way training logs
them: what tests/test_study_tables.py reads with `rvctl report --vs/--table` and compares with
the tables the study's scripts made of it (tests/data/study_tables/, written before those
scripts moved into rollverify/experiments/)."""

from __future__ import annotations

import numpy as np

from rollverify.tracking import metric_names as m
from tests.report_store import STEPS, Store

SEEDS = (0, 1, 2)


def study_metrics(rng: np.random.Generator, eta: int, verifying: bool) -> dict:
    """What the study's tables read beyond Store's metrics: per-token staleness and the share
    8+ versions old (growing with eta), what each verification stage cut, the cap's drops."""
    steps = range(1, STEPS + 1)
    extra = {
        m.STALENESS_TOKEN_MEAN: {s: eta * rng.uniform(0.4, 0.6) for s in steps},
        m.STALE_TOKEN_SHARE_8: {s: min(1.0, eta / 16 * rng.uniform(0.5, 1.0)) for s in steps},
        m.TRAJECTORIES_DROPPED_STALE: {s: float(rng.integers(0, 3)) for s in steps},
    }
    if verifying:
        extra[m.TOKENS_CUT_SEQUENCE_STAGE] = {s: float(rng.integers(0, 2000)) for s in steps}
        extra[m.TOKENS_CUT_TOKEN_STAGE] = {s: float(rng.integers(0, 50)) for s in steps}
    return extra


def make_study_store(store: Store) -> Store:
    """Synchronous grpo and partial; async grpo, partial-recomputed and rollverify at eta 0
    and 8 (rollverify switching on some seeds), grpo at eta 8 in start order, partial under a
    staleness cap of 0, a correction (tis), and rollverify at dt 0.2 and 2. Seeds 0-2, with a
    seed missing here and there so that pairing by seed differs from pairing by position."""
    rng = np.random.default_rng(1)

    def log(method, seed, eta=0, *, verifying=False, switch_at=None, **params):
        store.run(
            method,
            seed,
            params={"train.seed": seed} | params,
            switch_at=switch_at,
            extra=study_metrics(rng, eta, verifying),
        )

    for seed in SEEDS:
        log("grpo", seed, **{"rollout.mode": "sync"})
        log("partial", seed, **{"rollout.mode": "sync"})
        log("partial", seed, **{"rollout.mode": "sync", "rollout.max_staleness": 0})
    for seed in SEEDS[:2]:
        log("tis", seed, **{"rollout.mode": "sync"})
    for eta in (8, 0):  # the doses out of order in the store
        for seed in reversed(SEEDS):
            dose = {"rollout.mode": "async", "rollout.eta": eta}
            log("grpo", seed, eta, **dose)
            log("partial-recomputed", seed, eta, **dose)
            switch = 3 + seed if eta and seed else None
            log("rollverify", seed, eta, verifying=True, switch_at=switch, **dose)
        start = {"rollout.mode": "async", "rollout.eta": eta, "rollout.batch_order": "start"}
        if eta:
            for seed in SEEDS:
                log("grpo", seed, eta, **start)
    for dt in ("2.0", "0.2"):
        for seed in SEEDS[1:] if dt == "0.2" else SEEDS:
            log("rollverify", seed, verifying=True, **{"verify.dt": dt, "rollout.mode": "sync"})
    return store
