"""numba's cache across files (rollverify/infra/numba_cache.py): a compiled function whose
callee lives in another file runs the new callee after that file changes, because the whole
cache goes when any file changes. The simulated engine's compiled kernel is split over such
files (rollout/engines/kernel/)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CALLER = """
from numba import njit

from twofiles.callee import value

@njit(cache=True)
def caller():
    return value()
"""

INIT = """
import os
from pathlib import Path

from twofiles import callee, caller
from rollverify.infra.numba_cache import forget_if_changed

if os.environ.get("FORGET", "1") == "1":
    forget_if_changed([callee.value, caller.caller], Path(__file__).parent.glob("*.py"))
"""


def _callee(number: int) -> str:
    return f"from numba import njit\n\n@njit(cache=True)\ndef value():\n    return {number}\n"


def _run(folder: Path, forget: bool) -> int:
    """A fresh process: the caller's result, from numba's cache where it has one."""
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]),
        "FORGET": "1" if forget else "0",
    }
    env.pop("NUMBA_CACHE_DIR", None)  # the cache beside the files, as in a checkout
    code = "from twofiles.caller import caller; print(caller())"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return int(done.stdout.split()[-1])


def _write_callee(package: Path, number: int, at: float) -> None:
    """The callee returning `number`, its file's time `at` (numba reads size and time)."""
    path = package / "callee.py"
    path.write_text(_callee(number))
    os.utime(path, (at, at))


def test_a_changed_callee_in_another_file_is_compiled_again(tmp_path):
    package = tmp_path / "twofiles"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(INIT))
    (package / "caller.py").write_text(textwrap.dedent(CALLER))
    _write_callee(package, 1, at=1_000_000_000)
    assert _run(tmp_path, forget=False) == 1  # compiled and cached
    _write_callee(package, 2, at=1_000_000_100)
    # numba alone: the caller's cache holds the old callee (its own file did not change)
    assert _run(tmp_path, forget=False) == 1
    assert _run(tmp_path, forget=True) == 2  # the cache dropped: both compiled again
    _write_callee(package, 3, at=1_000_000_200)
    assert _run(tmp_path, forget=True) == 3
    assert _run(tmp_path, forget=True) == 3  # and cached again, still right


def test_the_kernel_drops_its_cache_when_any_of_its_files_changes():
    """Every compiled function of the kernel, and every file of it, is in the digest."""
    from rollverify.rollout.engines import kernel

    names = {f.py_func.__name__ for f in kernel.compiled_functions()}
    assert {"run_polls", "submit", "pause", "admit", "preempt", "decode", "prefix_hits"} <= names
    assert {"decode_run", "prefill", "flush", "blocks_at"} <= names
    files = {p.name for p in (ROOT / "rollverify/rollout/engines/kernel").glob("*.py")}
    assert {f"{m.__name__.rsplit('.', 1)[-1]}.py" for m in kernel.MODULES} == files - {
        "__init__.py"
    }
