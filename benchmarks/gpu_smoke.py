"""The first run on a GPU: does rvctl train, checkpoint and resume there? JSON out.

    python3 benchmarks/gpu_smoke.py [--out DIR] [--toy] [--steps N] [--methods grpo,rollverify]
        [--no-gpu-check]
    (benchmarks/gpu_smoke.sh runs it on a lent GPU machine, carried wheels installed first)

Phases, each a process of its own, timed, its exit code and last lines kept:
  1. gpu_check: benchmarks/gpu_check.py, the cost profile of this GPU (--toy: its toy size);
  2. model: a Qwen3 with Qwen3-0.6B's decoder (28 layers, hidden 1024, 16 heads of 128, 8 KV
     heads, MLP 3072) and random weights in bf16, with the embedded chain task's tokenizer and
     vocabulary (no hub here: the task's 21 tokens, not Qwen's 151,936); --toy: 2 layers of 64;
  3. for grpo and rollverify: `rvctl train --engine hf` for N steps (a checkpoint every
     N - 1), then `rvctl resume` of that run to N + 1 steps; each must exit 0 and the resumed
     run must reach step N + 1.
Needs torch, transformers and what rvctl imports (TRL, MLflow; not vLLM or Ray). Sized to fit
in 8 minutes on one H100 or H200 with its defaults; --toy runs on any CPU (tests/test_gpu_smoke.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QWEN3_06B = dict(hidden_size=1024, layers=28, heads=16, kv_heads=8, head_dim=128, mlp=3072)
TOY = dict(hidden_size=64, layers=2, heads=4, kv_heads=2, head_dim=16, mlp=128)
METHODS = ("grpo", "rollverify")


def run(name: str, command: list[str], phases: list[dict], timeout: float = 600) -> bool:
    """One phase: `command` from the repository's root, timed; False where it failed."""
    started = time.perf_counter()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        code, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        code, out = 124, f"timed out after {timeout} s: {expired}"
    seconds = round(time.perf_counter() - started, 1)
    phases.append({"phase": name, "exit_code": code, "seconds": seconds})
    if code != 0:
        phases[-1]["last_lines"] = out.strip().splitlines()[-12:]
    print(f"{name}: exit {code} in {seconds} s", flush=True)
    return code == 0


def build_model(folder: Path, shape: dict) -> dict:
    """The model of phase 2, written to `folder` (weights in bf16, safetensors)."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from rollverify.infra.paths import shipped

    tokenizer = AutoTokenizer.from_pretrained(shipped("models/tiny-qwen3-chain"))
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=shape["hidden_size"],
        intermediate_size=shape["mlp"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        head_dim=shape["head_dim"],
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"parameters": sum(p.numel() for p in model.parameters()), **shape}


def rvctl(*args: str) -> list[str]:
    return [sys.executable, "-m", "rvctl.app", *args]


def smoke(out: Path, toy: bool, steps: int, methods: tuple[str, ...], gpu_check: bool) -> dict:
    import torch

    phases: list[dict] = []
    check = [sys.executable, "benchmarks/gpu_check.py", "--out", str(out / "gpu_profile.json")]
    if gpu_check:
        run("gpu_check", check + (["--toy"] if toy else []), phases)
    model = out / "model"
    started = time.perf_counter()
    built = build_model(model, TOY if toy else QWEN3_06B)
    phases.append(
        {"phase": "model", "exit_code": 0, "seconds": round(time.perf_counter() - started, 1)}
    )
    settings = ["--set", f"model.path={model}", "--set", "model.dtype=bfloat16"]
    settings += ["--set", "vllm.sync_check_tolerance=0.1"]  # bf16's, as the GPU recipes set it
    settings += ["--set", f"train.checkpoint_every={steps - 1}", "--set", "train.eval_every=1000"]
    resumed = {}
    for method in methods:
        runs = out / "runs" / method
        train = rvctl("train", "--engine", "hf", "--method", method, "--steps", str(steps))
        if not run(f"train {method}", train + ["--output", str(runs), *settings], phases):
            continue
        (run_dir,) = [p for p in runs.iterdir() if (p / "checkpoints").is_dir()]
        resume = rvctl("resume", str(run_dir), "--steps", str(steps + 1))
        if run(f"resume {method}", resume, phases):
            resumed[method] = last_step(run_dir)
    return {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "toy": toy,
        "model": built,
        "steps": steps,
        "phases": phases,
        "last_step_after_resume": resumed,
        "passed": all(p["exit_code"] == 0 for p in phases)
        and all(resumed.get(m) == steps + 1 for m in methods),
    }


def last_step(run_dir: Path) -> int | None:
    """The step of the run's newest checkpoint (the resume writes one at its end)."""
    from rollverify.training.checkpoint.files import steps

    written = steps(run_dir / "checkpoints")
    return max(written) if written else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_smoke"))
    parser.add_argument("--toy", action="store_true", help="tiny sizes: runs on any CPU")
    parser.add_argument("--steps", type=int, default=3, help="trained before the resume (>= 2)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument(
        "--no-gpu-check", dest="gpu_check", action="store_false", help="skip phase 1"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    methods = tuple(args.methods.split(","))
    result = smoke(args.out.resolve(), args.toy, max(args.steps, 2), methods, args.gpu_check)
    (args.out / "gpu_smoke.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("device", "passed", "last_step_after_resume")}))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
