"""A refactor changes no run: short seeded runs and `rvctl simulate` tables, at a base revision
and at this checkout, compared. Prints one JSON object (each run's counts and differences).

    .venv/bin/python benchmarks/runs_unchanged.py --base 114ec51 \
        --out benchmarks/results/runs_unchanged_60.json

Each run is `rvctl train` on the hf engine, seed 0, one thread, a checkpoint every step: grpo,
partial, rollverify, asynchronous rollverify in lock-step, chain_tool (synchronous and
asynchronous), and the code and math tasks on a random byte model
(rollverify/tiny/byte_model.py). Compared: every metric the run logged but timings
(rollverify/tracking/reproducibility.py `comparable`), every checkpoint file's bytes and its
state (measured seconds aside), the trace (all but its seconds), the ledger's tokens and
modeled seconds, the summary. The retool task is left out: its sandboxed calls
run beside the engine, so which step a response resumes at depends on timing. The tables
are `rvctl simulate`'s JSON, compiled and Python engines, asynchronous, tool calls, growing
lengths: byte for byte. The base revision runs from `git archive`, in a folder of its own.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml
from provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rollverify.tracking.reproducibility import comparable, metric_history  # noqa: E402

TINY = {
    "train": {"steps": 3, "eval_every": 0, "threads": 1, "checkpoint_every": 1, "seed": 0},
    "task": {"max_steps": 6, "eval_size": 8},
    "rollout": {"batch_groups": 2, "group_size": 2, "slots": 8, "max_new_tokens": 64},
    "tracking": {"plots": False},
}
ASYNC = {"rollout": {"mode": "async", "eta": 2, "lockstep": True}}
TOOL = {"task": {"name": "chain_tool"}, "model": {"path": "models/tiny-qwen3-chain-tool"}}


def files_task(name: str, method: str, data: Path, model: Path) -> dict:
    """A task of problem files on a random byte model: 2 steps, shorter responses."""
    return {
        "train": {"method": method, "steps": 2},
        "rollout": {"max_new_tokens": 48},
        "task": {"name": name, "train_file": str(data), "eval_file": str(data), "eval_size": 2},
        "model": {"path": str(model)},
    }


def runs(work: Path) -> dict[str, dict]:
    """Each run's config, as diffs of TINY."""
    return {
        "grpo": {"train": {"method": "grpo"}},
        "partial": {"train": {"method": "partial"}},
        "rollverify": {"train": {"method": "rollverify", "eval_every": 2}},
        "async_lockstep": ASYNC | {"train": {"method": "rollverify", "steps": 4}},
        "chain_tool": TOOL | {"train": {"method": "rollverify"}},
        "chain_tool_async": _merged(TOOL, ASYNC) | {"train": {"method": "tis"}},
        "code": files_task("code", "rollverify", work / "add.jsonl", work / "byte-model"),
        "math": files_task("math", "rollverify", work / "sums.json", work / "byte-model"),
    }


SIMULATIONS = {
    "compiled": ["--steps", "4", "--context", "8192,32768", "--seeds", "2"],
    "reference": ["--steps", "4", "--context", "8192", "--reference"],
    "async": ["--steps", "4", "--async", "1,2", "--async-verify", "--set", "rollout.engine=vllm"],
    "tools": ["--steps", "3", "--tool-calls", "2,1.0,1.0,64"],
    "growth": ["--steps", "4", "--end-median", "4000", "--growth", "log", "--acceptance", "0.5"]
    + ["--no-kv-cache"],
}


def _merged(*diffs: dict) -> dict:
    merged: dict = {}
    for diff in diffs:
        for section, fields in diff.items():
            merged[section] = merged.get(section, {}) | fields
    return merged


def prepare(work: Path) -> None:
    """The byte model and the problem files the code and math runs read."""
    from rollverify.tiny.byte_model import byte_model

    byte_model(work / "byte-model", [], {"<eos>": 0.04})
    problems = [
        {"prompt": f"Write add{i}(a, b).", "tests": [f"assert add{i}(1, 2) == 3"]} for i in range(4)
    ]
    (work / "add.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    sums = [{"problem": f"{i}+{i}?", "answer": str(2 * i)} for i in range(4)]
    (work / "sums.json").write_text(json.dumps(sums))


def train_all(code: Path, work: Path, out: Path) -> None:
    """Every run, trained by the code in `code`, each into out/<name>."""
    env = os.environ | {"PYTHONPATH": str(code)}
    for name, diff in runs(work).items():
        config = work / f"{name}.yaml"
        config.write_text(yaml.safe_dump(_merged(TINY, {"rollout": {"engine": "hf"}}, diff)))
        command = [sys.executable, "-m", "rvctl.app", "train", "--config", str(config)]
        command += ["--output", str(out / name), "-f", "json"]
        subprocess.run(command, cwd=code, env=env, check=True, capture_output=True)


def simulate_all(code: Path, out: Path) -> None:
    env = os.environ | {"PYTHONPATH": str(code)}
    recipe = str(code / "experiments" / "qwen3-8b-dapo-math.yaml")
    for name, options in SIMULATIONS.items():
        command = [sys.executable, "-m", "rvctl.app", "simulate", "-c", recipe, "--workers", "1"]
        done = subprocess.run(
            [*command, *options, "-f", "json"], cwd=code, env=env, check=True, capture_output=True
        )
        (out / f"{name}.json").write_bytes(done.stdout)


# -- comparing two runs ------------------------------------------------------------------------

MEASURED = ("device_seconds", "wall_seconds", "tool_cpu_seconds", "overlap", "device_days")
PATHS = ("run_id", "tracking_uri", "output", "run_dir", "mlflow")


def scrub(value):
    """Measured timings and paths out; modeled seconds (priced from the trace) kept."""
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            name = str(key)
            modeled = name.startswith("modeled")
            timed = any(t in name for t in ("seconds", "time", "runtime", "per_second"))
            if not modeled and (timed or name in MEASURED or name in PATHS or "cost_" in name):
                continue
            kept[key] = scrub(item)
        return kept
    if isinstance(value, list):
        return [scrub(item) for item in value]
    return "nan" if isinstance(value, float) and math.isnan(value) else value


def differences(before, after, where: str) -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) | set(after), key=str):
            if key not in before or key not in after:
                found.append(f"{where}.{key}: in one only")
            else:
                found += differences(before[key], after[key], f"{where}.{key}")
        return found
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [
            d
            for i, (b, a) in enumerate(zip(before, after, strict=True))
            for d in differences(b, a, f"{where}[{i}]")
        ]
    return [] if before == after else [f"{where}: {str(before)[:60]} != {str(after)[:60]}"]


def run_folder(out: Path) -> Path:
    (folder,) = [p for p in out.iterdir() if (p / "config.yaml").is_file()]
    return folder


def compare_runs(before: Path, after: Path) -> dict:
    old, new = run_folder(before), run_folder(after)
    found, counts = [], {}
    logged = []
    for folder in (old, new):
        record = json.loads((folder / "mlflow.json").read_text())
        logged.append(comparable(metric_history(record["tracking_uri"], record["run_id"])))
    found += differences(scrub(logged[0]), scrub(logged[1]), "metrics")
    counts["metric_values"] = sum(len(v) for v in logged[0].values())
    steps = sorted(p.name for p in (old / "checkpoints").iterdir())
    if steps != sorted(p.name for p in (new / "checkpoints").iterdir()):
        found.append("checkpoints: not the same steps")
    counts["checkpoints"], counts["tensor_files"] = len(steps), 0
    for step in steps:
        for path in sorted((old / "checkpoints" / step).glob("*.safetensors")):
            counts["tensor_files"] += 1
            if _sha(path) != _sha(new / "checkpoints" / step / path.name):
                found.append(f"{step}/{path.name}: bytes differ")
        for name in ("state.json", "trainer_state.json"):
            pair = [json.loads((f / "checkpoints" / step / name).read_text()) for f in (old, new)]
            found += differences(scrub(pair[0]), scrub(pair[1]), f"{step}/{name}")
    traces = sorted(p.name for p in (old / "trace").glob("*.parquet"))
    if traces != sorted(p.name for p in (new / "trace").glob("*.parquet")):
        found.append("trace: not the same files")
    counts["trace_rows"] = 0
    for name in traces:
        tables = [pd.read_parquet(f / "trace" / name) for f in (old, new)]
        columns = [c for c in tables[0].columns if c != "seconds"]
        same = list(tables[0].columns) == list(tables[1].columns) and tables[0][columns].astype(
            str
        ).equals(tables[1][columns].astype(str))
        found += [] if same else [f"trace/{name}: rows differ"]
        counts["trace_rows"] += len(tables[0])
    for name in ("ledger.json", "summary.json"):
        pair = [json.loads((f / name).read_text()) for f in (old, new)]
        found += differences(scrub(pair[0]), scrub(pair[1]), name)
    return {"counts": counts, "differences": found}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision before the refactor")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="refactor-check-") as temporary:
        work = Path(temporary)
        base = work / "base"
        base.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.base], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        prepare(work)
        for side, code in (("before", base), ("after", ROOT)):
            train_all(code, work, work / side)
            (work / side / "simulate").mkdir()
            simulate_all(code, work / side / "simulate")
        report = {
            "benchmark": "runs_unchanged",
            "base": args.base,
            "runs": {
                name: compare_runs(work / "before" / name, work / "after" / name)
                for name in runs(work)
            },
            "simulate_tables_equal": {
                name: (work / "before" / "simulate" / f"{name}.json").read_bytes()
                == (work / "after" / "simulate" / f"{name}.json").read_bytes()
                for name in SIMULATIONS
            },
            "provenance": provenance(),
        }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
