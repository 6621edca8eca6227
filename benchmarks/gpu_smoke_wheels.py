"""The wheels benchmarks/gpu_smoke.sh needs on a GPU image that lacks them, into .whl/.

    .venv/bin/python benchmarks/gpu_smoke_wheels.py [--image benchmarks/gpu_image_packages.txt]
        [--out .whl] [--python 3.12] [--budget-mib 36]

Which: the distributions whose files `rvctl train` imports (a toy run here, recorded), less
those the image already has (--image: one name a line, as the device tool's page lists them),
at the versions constraints-cpu.txt pins; fetched with `pip download --no-deps` for CPython
--python on manylinux x86_64. Prints each wheel's size and the total, and exits 1 past
--budget-mib (the working tree travels with them: 64 MiB in all).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
PLATFORMS += ["manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux1_x86_64"]
RECORDER = """
import atexit, json, runpy, sys
out = sys.argv[1]
def record():
    files = sorted({getattr(m, "__file__", None) or "" for m in list(sys.modules.values())})
    open(out, "w").write(json.dumps([f for f in files if f]))
atexit.register(record)
sys.argv = ["rvctl", *sys.argv[2:]]
runpy.run_module("rvctl.app", run_name="__main__")
"""


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_distributions(work: Path) -> set[str]:
    """The distributions whose files a toy `rvctl train --engine hf` imports."""
    model = work / "model"
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_smoke import TOY, build_model

    build_model(model, TOY)
    files = work / "files.json"
    train = ["train", "--engine", "hf", "--method", "rollverify", "--steps", "2"]
    train += ["--set", f"model.path={model}", "--set", "model.dtype=bfloat16"]
    train += ["--set", "vllm.sync_check_tolerance=0.1", "--output", str(work / "runs")]
    command = [sys.executable, "-c", RECORDER, str(files), *train]
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True)
    # a file two distributions hold (mlflow has mlflow-skinny's files too) goes to the one
    # with fewer files, the narrower: the last written, as they come widest first
    owners: dict[str, str] = {}
    for distribution in sorted(
        importlib.metadata.distributions(), key=lambda d: -len(d.files or [])
    ):
        for file in distribution.files or []:
            owners[str(file.locate().resolve())] = normalized(distribution.metadata["Name"])
    imported = json.loads(files.read_text())
    return {owners[str(Path(f).resolve())] for f in imported if str(Path(f).resolve()) in owners}


def pinned() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints-cpu.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[normalized(name)] = version.split("+")[0]
    return pins


def download(names: list[str], pins: dict[str, str], out: Path, python: str) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", python, "--implementation", "cp", "-d", str(out), "-q"]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    subprocess.run(command + [f"{n}=={pins[n]}" for n in names], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, default=ROOT / "benchmarks/gpu_image_packages.txt")
    parser.add_argument("--out", type=Path, default=ROOT / ".whl")
    parser.add_argument("--python", default="3.12")
    parser.add_argument("--budget-mib", type=float, default=36.0)
    args = parser.parse_args()
    lines = args.image.read_text().splitlines()
    image = {normalized(line) for line in lines if line.strip() and not line.startswith("#")}
    with tempfile.TemporaryDirectory() as work:
        needed = imported_distributions(Path(work)) - image - {"rollverify"}
    names = sorted(needed)
    args.out.mkdir(exist_ok=True)
    download(names, pinned(), args.out, args.python)
    wheels = sorted(args.out.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels)
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
    print(f"{total / 2**20:7.2f} MiB in {len(wheels)} wheels: {', '.join(names)}")
    return 0 if total <= args.budget_mib * 2**20 else 1


if __name__ == "__main__":
    sys.exit(main())
