"""The simulations the simulator's benchmarks time (simulate_bench.py, simulate_terms.py): each
(context, method) of the settings once, seed 0, timed here."""

from __future__ import annotations

import time

from rollverify.experiments.simulate import simulate_one
from rollverify.experiments.simulate_results import rows
from rollverify.experiments.simulate_settings import Settings


def timed_table(config, settings: Settings) -> dict:
    """The table's rows, each run's modeled seconds by phase (with the prefills' share of the
    rollout), and each simulation's wall seconds here."""
    results, seconds = [], []
    for context in settings.contexts:
        for method in settings.methods:
            started = time.perf_counter()
            results.append(simulate_one(config, settings, method, context, seed=0))
            seconds.append(
                {"method": method, "context": context, "seconds": time.perf_counter() - started}
            )
    return {
        "rows": rows(results),
        "phase_seconds": [
            {
                "method": r.method,
                "context": r.context,
                **r.seconds,
                "of_rollout_prefill": r.prefill_seconds,
            }
            for r in results
        ],
        "simulation_wall_seconds": seconds,
    }
