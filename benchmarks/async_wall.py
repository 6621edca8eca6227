"""Measured wall time of synchronous, partial and asynchronous training on the embedded default
(the hf engine, or the vLLM sidecar, on this machine's CPU), side by side in one run. Prints one
JSON object.

    .venv/bin/python benchmarks/async_wall.py [--engine hf|vllm] [--steps 20] [--eta 2]
        [--set KEY=VALUE ...]

Each variant is one `rvctl train` in a process of its own, one after another (never two at
once: on 2 cores they would time each other). What the engine beside the trainer buys is
only overlap: the trainer's update runs while the engine generates, one core each
(train.threads 1, so the two threads' kernels do not fight for the same cores); the
synchronous variants get the same two cores for each of their phases instead (train.threads 2,
and 1 for reference). CPU seconds, not GPU seconds: a GPU's rollout/train split and its
pricing are the cost model's (docs/cost-model.md). On vLLM the sidecar is a process of its
own from the start: it generates beside the trainer in every variant that leaves it work
(lock-step too, where it starts nothing new until the next batch is asked for); its start is
not in the ledger's wall.
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

VARIANTS = {  # name -> (method, overrides)
    "grpo sync, 2 threads": ("grpo", {"train.threads": 2}),
    "grpo sync, 1 thread": ("grpo", {"train.threads": 1}),
    "partial sync, 2 threads": ("partial", {"train.threads": 2}),
    "async lock-step, 2 threads": ("partial", {"train.threads": 2, "rollout.mode": "async"}),
    "async engine thread, 1 thread each": (
        "partial",
        {"train.threads": 1, "rollout.mode": "async", "rollout.lockstep": False},
    ),
    "async engine thread + verification": (
        "rollverify",
        {"train.threads": 1, "rollout.mode": "async", "rollout.lockstep": False},
    ),
}


def run(method: str, overrides: dict, steps: int, extra: list[str], output: Path) -> dict:
    settings = {"rollout.engine": ENGINE, "train.eval_every": steps, "rollout.eta": ETA}
    settings |= overrides
    command = [sys.executable, "-m", "rvctl.app", "train", "--method", method]
    command += ["--steps", str(steps), "--output", str(output)]
    for key, value in settings.items():
        command += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    for item in extra:
        command += ["--set", item]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    (run_dir,) = output.glob(f"{method}-s*")
    ledger = json.loads((run_dir / "ledger.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "command": " ".join(command[1:]),
        "process_seconds": seconds,
        "ledger_wall_seconds": ledger["wall_seconds"],
        "device_seconds": ledger["device_seconds"],
        "overlap": ledger.get("overlap"),
        "eval_accuracy_after": summary["eval_accuracy_after"],
        "tokens": ledger["tokens"],
    }


def main() -> None:
    global ETA, ENGINE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eta", type=int, default=2)
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf")
    parser.add_argument("--set", action="append", default=[], dest="settings")
    parser.add_argument("--variants", default="", help="comma-separated names (default: all)")
    args = parser.parse_args()
    ETA, ENGINE = args.eta, args.engine
    chosen = {k: v for k, v in VARIANTS.items() if not args.variants or k in args.variants}
    report: dict = {"benchmark": "async_wall", "engine": args.engine, "steps": args.steps}
    report |= {"eta": args.eta, "runs": {}}
    with tempfile.TemporaryDirectory() as folder:
        for index, (name, (method, overrides)) in enumerate(chosen.items()):
            output = Path(folder) / str(index)
            report["runs"][name] = run(method, overrides, args.steps, args.settings, output)
            print(name, round(report["runs"][name]["ledger_wall_seconds"], 1), file=sys.stderr)
    base = report["runs"].get("grpo sync, 2 threads")
    if base:
        for row in report["runs"].values():
            row["wall_ratio_vs_grpo_2_threads"] = (
                row["ledger_wall_seconds"] / base["ledger_wall_seconds"]
            )
    report["provenance"] = provenance()
    print(json.dumps(report, indent=2, default=str))


ETA, ENGINE = 2, "hf"

if __name__ == "__main__":
    main()
