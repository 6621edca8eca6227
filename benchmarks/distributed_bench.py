"""What training on 2 processes costs against 1, side by side on the embedded default.

    .venv/bin/python benchmarks/distributed_bench.py [--steps 8] [--repeats 2]

Runs `rvctl train` of the default config (hf engine) with train.processes 1 and 2 on the
same cores (1 process x all cores' threads, 2 x half each), interleaved run by run, and
reports: seconds per step (the run's
ledger: its phases but the evaluations and checkpoints, over its steps), the update's seconds
(train phase), the weight sync's, and the peak resident memory of each trainer process
(sampled every 0.1 s over the process tree). On 2 CPU cores two processes are not faster:
the figure is what the distributed path costs here, not a GPU speedup. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import yaml
from provenance import provenance


def settings(steps: int, processes: int) -> dict:
    threads = max(1, (os.cpu_count() or 2) // processes)  # the same cores for every arm
    return {
        "rollout": {"engine": "hf"},
        "train": {
            "steps": steps,
            "eval_every": 0,
            "checkpoint_every": 0,
            "threads": threads,
            "processes": processes,
        },
    }


def peak_memory(process: subprocess.Popen, peaks: dict[int, int], done: threading.Event) -> None:
    """Peak RSS of every python process in the tree (the trainer processes), by pid."""
    root = psutil.Process(process.pid)
    while not done.wait(0.1):
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for member in tree:
            try:
                if "python" in member.name():
                    peaks[member.pid] = max(peaks.get(member.pid, 0), member.memory_info().rss)
            except psutil.NoSuchProcess:
                continue


def one_run(folder: Path, steps: int, processes: int) -> dict:
    folder.mkdir(parents=True)
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(settings(steps, processes)))
    command = [sys.executable, "-m", "rvctl.app", "train", "--config", str(config)]
    command += ["--output", str(folder / "runs"), "-f", "json"]
    peaks: dict[int, int] = {}
    done = threading.Event()
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher = threading.Thread(target=peak_memory, args=(process, peaks, done), daemon=True)
    watcher.start()
    stdout, stderr = process.communicate()
    done.set()
    watcher.join()
    if process.returncode != 0:
        raise SystemExit(stderr[-3000:])
    wall = time.perf_counter() - started
    (summary,) = json.loads(stdout)
    ledger = json.loads((Path(summary["run_dir"]) / "ledger.json").read_text())
    seconds = ledger["device_seconds"]
    held = ledger["layout"]["trainer"] + ledger["layout"]["engines"]
    # phases + idle = wall x devices held: a step's wall is that less the evaluations and
    # checkpoints, over the devices and the steps
    outside = seconds.get("eval", 0.0) + seconds.get("checkpoint", 0.0)
    trainers = sorted(peaks.values(), reverse=True)[:processes]  # (the launcher is smaller)
    return {
        "command_seconds": wall,
        "step_seconds": (sum(seconds.values()) - outside) / held / steps,
        "train_seconds_per_step": seconds["train"] / ledger["layout"]["trainer"] / steps,
        "sync_seconds_per_step": seconds["sync"] / held / steps,
        "peak_rss_megabytes_per_trainer": [round(p / 1e6, 1) for p in trainers],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    runs: dict[int, list[dict]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as root:
        for repeat in range(args.repeats):  # interleaved: both see the same machine state
            for processes in (1, 2):
                folder = Path(root) / f"p{processes}-{repeat}"
                runs[processes].append(one_run(folder, args.steps, processes))

    def median(processes: int, key: str) -> float:
        return statistics.median(r[key] for r in runs[processes])

    result = {
        "steps": args.steps,
        "repeats": args.repeats,
        "step_seconds": {p: median(p, "step_seconds") for p in runs},
        "step_seconds_2_over_1": median(2, "step_seconds") / median(1, "step_seconds"),
        "train_seconds_per_step": {p: median(p, "train_seconds_per_step") for p in runs},
        "sync_seconds_per_step": {p: median(p, "sync_seconds_per_step") for p in runs},
        "peak_rss_megabytes_per_trainer": {
            p: max(max(r["peak_rss_megabytes_per_trainer"]) for r in runs[p]) for p in runs
        },
        "runs": runs,
        "provenance": provenance({f"processes_{p}": settings(args.steps, p) for p in (1, 2)}),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
