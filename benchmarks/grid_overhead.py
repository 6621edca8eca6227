"""What logging verify.threshold_grid costs a check (issue 74, item 1); prints and writes JSON.

    .venv/bin/python benchmarks/grid_overhead.py [--steps 8] [--engines hf,vllm] \
        [--out benchmarks/results/grid_overhead.json]

Two measurements, each with and without the grid side by side in one run:
- in runs: the embedded default, RollVerify, `--steps` steps on each engine, once with the
  default grid and once with `verify.threshold_grid=[]` (the same seed: the same caches, the
  grid changes nothing the run does). A step's `verify_seconds` is its check: scoring the
  cache under the new policy, verifying it, and the grid. Compared step by step.
- the check's arithmetic alone, at a paper-scale cache (verify_bench.py's batch, 4096 rows of
  up to 4096 tokens): the run's own verification (token OPS, both stages) against the grid's
  (the per-version drift its auto points need, then 9 points at two dt each, from one pass
  over the cache: core/threshold_grid.py), no forward pass.
CPU seconds, on this machine: ratios, not GPU figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from provenance import provenance
from verify_bench import make_cache_batch, time_call

from rollverify.core.auto_thresholds import per_version_drift
from rollverify.core.off_policy_shift import token_ops
from rollverify.core.threshold_grid import DEFAULT_GRID, grid_kept
from rollverify.core.verify import verify_stages
from rollverify.tracking.metric_names import VERIFY_SECONDS
from rollverify.tracking.run_records import load_report

ROOT = Path(__file__).resolve().parent.parent
RV = str(ROOT / ".venv" / "bin" / "rvctl")
GRIDS = {"with_grid": None, "without_grid": "[]"}  # None: the config's default grid


def run(engine: str, grid: str | None, steps: int, output: Path) -> dict[int, float]:
    """One run's verify_seconds by step."""
    command = [RV, "train", "--method", "rollverify", "--steps", str(steps), "--engine", engine,
               "--no-eval", "--output", str(output)]  # fmt: skip
    if grid is not None:
        command += ["--set", f"verify.threshold_grid={grid}"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (record,) = load_report([str(output)], prefixes=(VERIFY_SECONDS,)).runs
    return record.history.get(VERIFY_SECONDS, {})


def in_runs(engine: str, steps: int, folder: Path) -> dict:
    seconds = {name: run(engine, grid, steps, folder / name) for name, grid in GRIDS.items()}
    with_grid, without = seconds["with_grid"], seconds["without_grid"]
    paired = sorted(set(with_grid) & set(without))
    ratios = [with_grid[s] / without[s] for s in paired if without[s] > 0]
    return {
        "steps_checked": len(paired),
        "verify_seconds_with_grid": [with_grid[s] for s in paired],
        "verify_seconds_without_grid": [without[s] for s in paired],
        "total_ratio": sum(with_grid[s] for s in paired) / sum(without[s] for s in paired),
        "median_step_ratio": statistics.median(ratios) if ratios else None,
    }


def arithmetic(repeats: int) -> dict:
    current, behavior, versions, mask, _ = make_cache_batch(4096, 4096)
    policy = mask

    def own():
        ops = token_ops(current, behavior, mask=policy)
        return verify_stages(ops, versions, mask, 0.01, 2.0, policy)

    ops = token_ops(current, behavior, mask=policy)
    newest = int(versions[mask].max()) + 1

    def grid():
        drift = per_version_drift(ops, versions, policy, newest)
        return grid_kept(ops, versions, mask, policy, DEFAULT_GRID, 2.0, drift)

    timed = {"own": time_call(own, repeats), "grid": time_call(grid, repeats)}
    medians = {name: statistics.median(s) for name, s in timed.items()}
    return {
        "cache": "4096 x 4096, verify_bench.py's",
        "generated_tokens": int(mask.sum()),
        "own_check_seconds_median": medians["own"],
        "grid_seconds_median": medians["grid"],
        "grid_over_own": medians["grid"] / medians["own"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/grid_overhead.json")
    args = parser.parse_args()
    torch.set_num_threads(2)
    started = time.perf_counter()
    report: dict = {"benchmark": "grid_overhead", "arithmetic": arithmetic(args.repeats)}
    with tempfile.TemporaryDirectory() as folder:
        for engine in filter(None, args.engines.split(",")):
            print(f"runs on {engine}", file=sys.stderr, flush=True)
            report[f"runs_{engine}"] = in_runs(engine, args.steps, Path(folder) / engine)
    report["seconds"] = time.perf_counter() - started
    report["provenance"] = provenance(vars(args) | {"out": str(args.out)})
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "provenance"}, indent=2))


if __name__ == "__main__":
    main()
