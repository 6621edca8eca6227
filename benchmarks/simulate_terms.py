"""What each term of the cost model changes at the paper's setting: the same simulation with
and without growing lengths and with and without the KV cache's capacity and preemption.
Prints one JSON object (rows per variant, each simulation's wall time here).

    .venv/bin/python benchmarks/simulate_terms.py [--steps 700] [--context 8192,65536]

The config is experiments/qwen3-8b-dapo-math.yaml (Qwen3-8B, 128 x 8 per step, 1,024 slots
over 4 one-GPU engines + 4 trainer GPUs, H100). Lengths: lognormal, median 1,500, sigma 0.9;
"grown": the median goes to 4,500 log-linearly over the run (docs/cost-model.md, "Lengths that
grow": an assumption, not a measured figure). The paper reports, for GRPO vs RollVerify: 8K
16.6 -> 15.1 GPU-days (1.10x), 64K 261 -> 137 (1.91x). Nothing here is tuned to them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace

from provenance import provenance
from simulate_runs import CONFIG, parser_of, settings_of, timed_table

from rollverify.config import load_config
from rollverify.experiments.simulate_settings import LengthModel, Settings

GROWN = {"end_median": 4500.0, "growth": "log"}


def variants(base: Settings) -> dict[str, Settings]:
    grown = replace(base.lengths, **GROWN)
    return {
        "fixed": replace(base, kv_cache=False),  # the model before issue 32
        "fixed+kv": base,
        "grown": replace(base, lengths=grown, kv_cache=False),
        "grown+kv": replace(base, lengths=grown),
    }


def main() -> None:
    parser = parser_of(__doc__.splitlines()[0])
    parser.add_argument(
        "--variants",
        default="",
        help="comma-separated: fixed, fixed+kv, grown, grown+kv (default: all)",
    )
    args = parser.parse_args()
    config = load_config(CONFIG)
    base = settings_of(args, lengths=LengthModel())
    chosen = variants(base)
    if args.variants:
        chosen = {k: v for k, v in chosen.items() if k in args.variants.split(",")}
    report: dict = {"benchmark": "simulate_terms", "variants": {}}
    for name, settings in chosen.items():
        settings.check()
        report["variants"][name] = {
            **timed_table(config, settings),
            "settings": asdict(settings),
        }
    report["paper"] = {"gpu_days_grpo_vs_rollverify": {"8192": [16.6, 15.1], "65536": [261, 137]}}
    report["provenance"] = provenance(config.to_dict())
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
