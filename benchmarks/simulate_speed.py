"""How long `rvctl simulate` takes, against an earlier revision, side by side in one run: the
same command in a worktree of `--baseline`, then in this checkout with the Python engine
(`--reference`) and with the compiled one (the default), one after another, each timed as a
whole process (wall seconds, and the machine's busy CPU seconds meanwhile), and whether the
tables are all equal. Prints one JSON
object (and writes it to `--out`).

    .venv/bin/python benchmarks/simulate_speed.py [--baseline REV] [--steps N] [--repeat N]
        [--context 8192,65536] [--methods grpo,partial,rollverify] [--out FILE]

The default case is issue 35's: the paper's setting (experiments/qwen3-8b-dapo-math.yaml, the
KV cache modeled, the recipe's 700 steps) at 8K and 64K, every method, with the default
workers (one per CPU). Goal: under 30 s on a 2-core machine. This machine's own speed drifts
(by up to a third from minute to minute), so the compiled run is timed `--repeat` times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "experiments/qwen3-8b-dapo-math.yaml"


def busy_cpu_seconds() -> float:
    """The CPU seconds this whole machine has been busy (/proc/stat: user, nice, system, irq,
    softirq). A command's own rusage misses its workers: they fork from a fork server
    (rollverify/experiments/workers.py), which nobody waits for."""
    fields = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def timed(tree: Path, args: list[str]) -> tuple[float, float, list]:
    """Wall seconds of the command, the machine's busy CPU seconds meanwhile (nothing else
    should run), and its table."""
    command = [sys.executable, "-m", "rvctl.app", "simulate", *args, "-f", "json"]
    cpu = busy_cpu_seconds()
    started = time.perf_counter()
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    used = busy_cpu_seconds() - cpu
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return seconds, used, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="16c5301", help="revision to compare with")
    parser.add_argument("--steps", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--context", default="8192,65536")
    parser.add_argument("--methods", default="grpo,partial,rollverify")
    parser.add_argument("--repeat", type=int, default=3, help="compiled runs (default 3)")
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
            before = timed(old, ["-c", old_config, *common])
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT)
    reference = timed(ROOT, ["-c", CONFIG, *common, "--reference"])
    compiled = [timed(ROOT, ["-c", CONFIG, *common]) for _ in range(args.repeat)]
    report = {
        "benchmark": "simulate_speed",
        "case": {
            "config": CONFIG,
            "context": args.context,
            "steps": args.steps or "recipe",
            "methods": args.methods,
        },
        "baseline": args.baseline,
        "baseline_seconds": before[0],
        "baseline_cpu_seconds": before[1],
        "reference_seconds": reference[0],
        "reference_cpu_seconds": reference[1],
        "compiled_seconds": [run[0] for run in compiled],
        "compiled_cpu_seconds": [run[1] for run in compiled],
        "speedup": before[0] / statistics.median(run[0] for run in compiled),
        "tables_equal": reference[2] == before[2] and all(run[2] == before[2] for run in compiled),
        "rows": compiled[0][2],
        "provenance": provenance(),
    }
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
