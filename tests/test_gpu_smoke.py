"""benchmarks/gpu_smoke.sh, the first run to make on a GPU, at toy size on this CPU: it trains
with the hf engine in bf16, checkpoints, resumes one step further, and writes what it saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]

# ~40 s (two rvctl processes): the long tier, for make test's 10 minutes (docs/testing.md)
pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_the_gpu_smoke_trains_checkpoints_and_resumes_at_toy_size(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "smoke"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # its python3
    command = ["benchmarks/gpu_smoke.sh", "--toy", "--methods", "rollverify", "--steps", "2"]
    command += ["--no-gpu-check"]  # (benchmarks/gpu_check.py --toy: tests/test_gpu_check.py)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "smoke" / "gpu_smoke.json").read_text())
    assert result["passed"] and result["last_step_after_resume"] == {"rollverify": 3}
    assert [p["phase"] for p in result["phases"]] == [
        "model",
        "train rollverify",
        "resume rollverify",
    ]
    assert result["model"]["layers"] == 2 and result["device"] == "cpu"
    config = json.loads((tmp_path / "smoke" / "model" / "config.json").read_text())
    assert config["dtype"] == "bfloat16"
