"""The simulations the simulator's benchmarks time (simulate_bench.py, simulate_terms.py): the
paper's setting, each (context, method) of the settings once, seed 0, timed here."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rollverify.experiments.simulate import simulate_one
from rollverify.experiments.simulate_results import rows
from rollverify.experiments.simulate_settings import Settings

CONFIG = Path(__file__).resolve().parents[1] / "experiments" / "qwen3-8b-dapo-math.yaml"


def parser_of(description: str) -> argparse.ArgumentParser:
    """The options both benchmarks take: --steps, --context, --methods."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=700)
    parser.add_argument("--context", default="8192,65536")
    parser.add_argument("--methods", default="grpo,partial,rollverify")
    return parser


def settings_of(args: argparse.Namespace, **more: Any) -> Settings:
    """rvctl simulate's settings for those options (and `more` of its fields)."""
    return Settings(
        methods=tuple(args.methods.split(",")),
        contexts=tuple(int(c) for c in args.context.split(",")),
        steps=args.steps,
        **more,
    )


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
