"""The paper's setting in the simulator: predicted GPU-days per method and context, and how long
each simulation takes here. Prints one JSON object.

    .venv/bin/python benchmarks/simulate_bench.py [--steps 700] [--context 8192,65536]

The config is experiments/qwen3-8b-dapo-math.yaml (Qwen3-8B, 128 x 8 per step, 4 engines + 4
trainer GPUs); lengths, acceptance and prompts are rvctl simulate's defaults, which the JSON
records (rollverify/experiments/simulate.py says why each was chosen). The paper reports, for
GRPO vs RollVerify on Qwen3-8B: 8K 16.6 -> 15.1 GPU-days (1.10x), 64K 261 -> 137 (1.91x), and a
rollout share of 70-80%. Nothing here is tuned to those figures.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace

from provenance import provenance
from simulate_runs import CONFIG, parser_of, settings_of, timed_table

from rollverify.config import load_config
from rollverify.experiments.simulate import simulate_one
from rollverify.experiments.simulate_settings import Settings


def sensitivity(config, settings: Settings, steps: int) -> list[dict]:
    """The assumptions that move the numbers: speedups vs grpo when the median response grows
    with the budget (a quarter of it) and when acceptance is 0.9 or 0.99, at fewer steps."""
    out = []
    for context in settings.contexts:
        for median in (settings.lengths.median, context / 4):
            varied = replace(
                settings,
                steps=steps,
                lengths=replace(settings.lengths, median=median),
            )
            grpo = simulate_one(config, varied, "grpo", context, seed=0).gpu_days
            cases = [("partial", None)] + [("rollverify", a) for a in (0.9, 0.95, 0.99)]
            for method, acceptance in cases:
                run = varied if acceptance is None else replace(varied, acceptance=(acceptance,))
                days = simulate_one(config, run, method, context, seed=0).gpu_days
                out.append(
                    {
                        "context": context,
                        "median_length": median,
                        "method": method,
                        "acceptance": acceptance,
                        "speedup_vs_grpo": grpo / days,
                    }
                )
    return out


def main() -> None:
    parser = parser_of(__doc__.splitlines()[0])
    parser.add_argument(
        "--sensitivity-steps", type=int, default=100, help="steps of the sensitivity runs"
    )
    parser.add_argument(
        "--kv-cache",
        action="store_true",
        help="model the KV cache's capacity (off: the model of simulate_bench.json; "
        "benchmarks/simulate_terms.py compares both)",
    )
    args = parser.parse_args()
    config = load_config(CONFIG)
    settings = settings_of(args, kv_cache=args.kv_cache)
    settings.check()
    timed = timed_table(config, settings)
    report = {
        "benchmark": "simulate_bench",
        "sensitivity": sensitivity(config, settings, args.sensitivity_steps),
        **timed,
        "settings": asdict(settings),
        "paper": {"gpu_days_grpo_vs_rollverify": {"8192": [16.6, 15.1], "65536": [261, 137]}},
        "provenance": provenance(config.to_dict()),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
