"""What checkpointing costs per step, measured side by side on the embedded default.

    .venv/bin/python benchmarks/checkpoint_bench.py [--steps 12] [--repeats 2]

Runs the default config (hf engine) with a checkpoint after every step and with none (but the
last), interleaved run by run, and reports from each run's cost ledger: seconds per checkpoint
(capture + safetensors/JSON writes + fsync + manifest checksums), the checkpoint's size, mean
step seconds without checkpoints, and the overhead ratio checkpoint seconds / step seconds
(what checkpoint_every=1 adds; checkpoint_every=N adds 1/N of it). A step's seconds are its
rollout, training, weight sync and cache verification: the two evaluations every run makes
(at the start and the end) are not part of a step. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from rollverify.infra.quiet import quiet_environment

quiet_environment()  # before TRL loads

from provenance import provenance  # noqa: E402

from rollverify.config import RunConfig, load_config  # noqa: E402
from rollverify.training.run import train  # noqa: E402

NOT_A_STEP = ("checkpoint", "idle", "eval")  # ledger phases outside a step's own work


def bench_config(folder: str, steps: int, every: int) -> RunConfig:
    return load_config(
        overrides={
            "rollout.engine": "hf",
            "train.steps": steps,
            "train.eval_every": 0,
            "train.checkpoint_every": every,
            "train.threads": 2,
            "output": folder,
        }
    )


def one_run(folder: str, steps: int, every: int) -> dict:
    config = bench_config(folder, steps, every)
    summary = train(config)
    ledger = json.loads((Path(summary.run_dir) / "ledger.json").read_text())
    checkpoints = sorted((Path(summary.run_dir) / "checkpoints").glob("step-*"))
    seconds = ledger["device_seconds"]
    # ledger.json is written before its step's checkpoint: it counts the ones of steps
    # 0 (training start) .. steps-1
    counted = 1 + ((steps - 1) // every if every else 0)
    return {
        "checkpoints_counted": counted,
        "checkpoint_bytes": sum(f.stat().st_size for f in checkpoints[-1].iterdir()),
        "checkpoint_seconds": seconds["checkpoint"],
        "seconds_per_checkpoint": seconds["checkpoint"] / counted,
        "step_seconds": sum(v for k, v in seconds.items() if k not in NOT_A_STEP) / steps,
        "eval_seconds": seconds["eval"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    every, never = [], []
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):  # interleaved: both see the same machine state
            every.append(one_run(f"{folder}/every-{repeat}", args.steps, 1))
            never.append(one_run(f"{folder}/never-{repeat}", args.steps, 0))
    per_checkpoint = [r["seconds_per_checkpoint"] for r in every]
    step_never = [r["step_seconds"] for r in never]
    step_every = [r["step_seconds"] for r in every]
    result = {
        "steps": args.steps,
        "repeats": args.repeats,
        "checkpoint_seconds_median": statistics.median(per_checkpoint),
        "checkpoint_megabytes": every[0]["checkpoint_bytes"] / 1e6,
        "step_seconds_without_checkpoints": statistics.median(step_never),
        "step_seconds_with_checkpoint_every_step": statistics.median(step_every),
        "overhead_every_step": statistics.median(per_checkpoint) / statistics.median(step_never),
        "runs": {"every": every, "never": never},
        "provenance": provenance(
            {  # the two arms differ in train.checkpoint_every alone
                "every_step": bench_config("<tmp>", args.steps, 1).to_dict(),
                "never": bench_config("<tmp>", args.steps, 0).to_dict(),
            }
        ),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
