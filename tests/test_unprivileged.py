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
pytestmark = pytest.mark.slow  # ~45 s: four test files again
FILES = (
    "tests/test_sandbox.py",
    "tests/test_reward_hacks.py",
    "tests/test_sandbox_view.py",
    "tests/test_reward_hacks_judge.py",
)


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
        _remove_unmounted(home)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary


def _run_as_unprivileged(python: str, home: Path) -> subprocess.CompletedProcess:
    paths = [str(REPO), *site.getsitepackages(), *os.environ.get("PYTHONPATH", "").split(":")]
    binds = _binds_for_the_unreachable([p for p in paths if p], home)
    paths = [_seen_as(path, binds) for path in paths]
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": ":".join(paths)}
    drop = ["setpriv", "--reuid", str(UNPRIVILEGED), "--regid", str(UNPRIVILEGED)]
    drop += ["--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
    pytest_args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    pytest_args += ["--basetemp", str(home / "basetemp"), *FILES]
    return subprocess.run(
        [*_mounting(binds), *drop, python, *pytest_args],
        cwd=_seen_as(str(REPO), binds),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _binds_for_the_unreachable(paths: list[str], home: Path) -> dict[str, str]:
    """A folder of `home`'s for each outermost path that uid 65534 cannot reach where it is:
    a clone under a 0700 folder (mkdtemp's, /root) and the venv in it."""
    unreachable = sorted(p for p in {os.path.realpath(p) for p in paths} if not _searchable(p))
    outermost = [p for p in unreachable if not any(p.startswith(q + "/") for q in unreachable)]
    binds = {}
    for index, path in enumerate(outermost):
        binds[path] = str(home / f"bound-{index}")
        os.mkdir(binds[path], 0o755)
    return binds


def _searchable(folder: str) -> bool:
    real = Path(folder)
    return all(p.stat().st_mode & stat.S_IXOTH for p in (real, *real.parents))


def _seen_as(path: str, binds: dict[str, str]) -> str:
    real = os.path.realpath(path)
    for source, target in binds.items():
        if real == source or real.startswith(source + "/"):
            return target + real[len(source) :]
    return path


def _mounting(binds: dict[str, str]) -> list[str]:
    """A private mount namespace in which each bind is mounted, then the command; none if
    nothing needs a bind. Private: the binds never show on the host, and die with the run."""
    if not binds:
        return []
    pairs = [part for source, target in binds.items() for part in (source, target)]
    script = 'while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 1; shift 2; done; shift; '
    script += 'exec "$@"'
    unshare = ["unshare", "--mount", "--propagation", "private", "--"]
    return [*unshare, "sh", "-c", script, "sh", *pairs, "--"]


def _remove_unmounted(home: Path) -> None:
    """Remove `home`, unless a bind is still mounted in it (it would delete the checkout)."""
    mounted = [p for p in home.iterdir() if p.is_dir() and os.path.ismount(p)]
    assert not mounted, f"still mounted on the host: {mounted}"
    shutil.rmtree(home, ignore_errors=True)
