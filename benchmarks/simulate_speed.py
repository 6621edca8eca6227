"""How long `rvctl simulate` takes, against an earlier revision, side by side in one run: the
same command in a worktree of `--baseline` and in this checkout, one after another, each timed
as a whole process; and whether both printed the same table. Prints one JSON object.

    .venv/bin/python benchmarks/simulate_speed.py [--baseline REV] [--steps 20]
        [--context 65536] [--methods grpo,rollverify]

The default case is the paper's setting at 64K (experiments/qwen3-8b-dapo-math.yaml, the KV
cache modeled) for 20 steps: the simulator's hottest case, short enough to run twice.
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


def timed(tree: Path, args: list[str]) -> tuple[float, list]:
    command = [sys.executable, "-m", "rvctl.app", "simulate", *args, "-f", "json"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="4d67bf7", help="revision to compare with")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--context", default="65536")
    parser.add_argument("--methods", default="grpo,rollverify")
    args = parser.parse_args()
    config = "experiments/qwen3-8b-dapo-math.yaml"
    with tempfile.TemporaryDirectory() as folder:
        old = Path(folder) / "baseline"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(old), args.baseline],
                       cwd=ROOT, check=True)  # fmt: skip
        try:
            old_config = config
            if not (old / config).is_file():  # before the recipes moved to the top level
                old_config = "rollverify/assets/" + config
            common = ["--context", args.context, "--steps", str(args.steps)]
            common += ["--methods", args.methods]
            before, old_rows = timed(old, ["-c", old_config, *common])
            after, new_rows = timed(ROOT, ["-c", config, *common])
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT)
    report = {
        "benchmark": "simulate_speed",
        "case": {
            "config": config,
            "context": args.context,
            "steps": args.steps,
            "methods": args.methods,
        },  # fmt: skip
        "baseline": args.baseline,
        "baseline_seconds": before,
        "seconds": after,
        "speedup": before / after,
        "same_table": old_rows == new_rows,
        "provenance": provenance(),
    }
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
