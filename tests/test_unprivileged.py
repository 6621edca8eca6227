"""The unprivileged path, the one users run: the sandbox's tests and the hack tests again as an
unprivileged uid (the sandbox then makes a user namespace of its own, namespaces+userns) when
the suite runs as root, as `make test` does here and in CI. Run as any other user, the suite
runs those files as they are, unprivileged already."""

from __future__ import annotations

import os
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
UNPRIVILEGED = 65534  # nobody
pytestmark = pytest.mark.slow  # ~30 s: two test files again
FILES = ("tests/test_sandbox.py", "tests/test_reward_hacks.py")


def reachable(path: str) -> bool:
    """Whether any user can execute `path` (every folder above it searchable by others; the
    sandbox's user namespace sees it as others do)."""
    real = Path(os.path.realpath(path))
    folders_ok = all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)
    return real.is_file() and folders_ok and bool(real.stat().st_mode & stat.S_IXOTH)


def unprivileged_python() -> str | None:
    """This interpreter if the unprivileged user can execute it, else the system's of the
    same version (a venv's base under /root is not reachable), else None."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [sys.executable, f"/usr/bin/{version}", shutil.which(version) or ""]
    return next((c for c in candidates if c and reachable(c)), None)


@pytest.mark.skipif(os.geteuid() != 0, reason="unprivileged already: the files run as they are")
def test_the_sandbox_and_hack_tests_pass_as_an_unprivileged_user():
    python = unprivileged_python()
    assert python is not None, "no Python the unprivileged user can execute: install python3"
    home = Path(tempfile.mkdtemp(prefix="rollverify-unprivileged-"))  # pytest's are root's 0700
    home.chmod(0o777)
    try:
        done = _run_as_unprivileged(python, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary


def _run_as_unprivileged(python: str, home: Path) -> subprocess.CompletedProcess:
    tmp_path = home
    paths = [str(REPO), *site.getsitepackages(), *os.environ.get("PYTHONPATH", "").split(":")]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": ":".join(paths)}
    drop = ["setpriv", "--reuid", str(UNPRIVILEGED), "--regid", str(UNPRIVILEGED)]
    drop += ["--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
    pytest_args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    pytest_args += ["--basetemp", str(tmp_path / "basetemp"), *FILES]
    return subprocess.run(
        [*drop, python, *pytest_args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
