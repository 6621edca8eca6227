"""How long `rvctl simulate` takes, against an earlier revision, side by side in one run: the
same command in a worktree of `--baseline` and in this checkout (exact, the default, and the
fast model of a full KV cache, `--fast`), one after another, each timed as a whole process; whether
the exact table equals the baseline's; how far the fast table is from the exact one. Prints
one JSON object (and writes it to `--out`).

    .venv/bin/python benchmarks/simulate_speed.py [--baseline REV] [--steps N]
        [--context 8192,65536] [--methods grpo,partial,rollverify] [--out FILE]

The default case is issue 35's: the paper's setting (experiments/qwen3-8b-dapo-math.yaml, the
KV cache modeled, the recipe's 700 steps) at 8K and 64K, every method, with the default
workers (one per CPU). Goal: under 30 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "experiments/qwen3-8b-dapo-math.yaml"


def timed(tree: Path, args: list[str]) -> tuple[float, list]:
    command = [sys.executable, "-m", "rvctl.app", "simulate", *args, "-f", "json"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout)


def gaps(fast: list[dict], exact: list[dict]) -> dict[str, float]:
    """The largest relative difference of each figure, fast against exact, over the rows."""
    out = {}
    for key in ("gpu_days", "speedup_vs_grpo", "preemptions", "tokens_recomputed"):
        pairs = [(f[key], e[key]) for f, e in zip(fast, exact, strict=True) if e[key]]
        out[key] = max((abs(f / e - 1) for f, e in pairs), default=0.0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="16c5301", help="revision to compare with")
    parser.add_argument("--steps", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--context", default="8192,65536")
    parser.add_argument("--methods", default="grpo,partial,rollverify")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    common = ["--context", args.context, "--methods", args.methods]
    common += ["--steps", str(args.steps)] if args.steps else []
    with tempfile.TemporaryDirectory() as folder:
        old = Path(folder) / "baseline"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(old), args.baseline],
                       cwd=ROOT, check=True)  # fmt: skip
        try:
            old_config = CONFIG
            if not (old / CONFIG).is_file():  # before the recipes moved to the top level
                old_config = "rollverify/assets/" + CONFIG
            before, old_rows = timed(old, ["-c", old_config, *common])
            exact, exact_rows = timed(ROOT, ["-c", CONFIG, *common])
            after, new_rows = timed(ROOT, ["-c", CONFIG, *common, "--fast"])
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT)
    report = {
        "benchmark": "simulate_speed",
        "case": {
            "config": CONFIG,
            "context": args.context,
            "steps": args.steps or "recipe",
            "methods": args.methods,
        },  # fmt: skip
        "baseline": args.baseline,
        "baseline_seconds": before,
        "exact_seconds": exact,
        "seconds": after,
        "speedup": before / after,
        "exact_speedup": before / exact,
        "exact_table_equals_baseline": exact_rows == old_rows,
        "fast_vs_exact_largest_relative_gap": gaps(new_rows, exact_rows),
        "rows": {"baseline": old_rows, "exact": exact_rows, "fast": new_rows},
        "provenance": provenance(),
    }
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
