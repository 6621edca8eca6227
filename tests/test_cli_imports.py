"""The CLI's cheap paths stay cheap: `rvctl --help`, `rvctl methods`, loading a config and a
sweep grid load none of the heavy libraries (each costs seconds to import). Each case runs in
a fresh interpreter, since this test process has imported them all already."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("mlflow", "ray", "trl", "vllm", "transformers")
ROOT = Path(__file__).resolve().parents[1]

CLI = """
import sys
sys.argv = ["rvctl", *{args!r}]
from rvctl.app import main  # the entry point of the installed `rvctl`
try:
    main()
except SystemExit as done:
    assert done.code in (0, None), done.code
"""

CASES = {
    "rvctl --help": CLI.format(args=["--help"]),
    "rvctl methods": CLI.format(args=["methods"]),
    "rvctl sweep --help": CLI.format(args=["sweep", "--help"]),
    "load_config": "from rollverify.config import load_config\nload_config()",
    "load_grid": (
        "from rollverify.experiments.sweep import load_grid\nload_grid(['ds'], {'ds': '0.01,0.05'})"
    ),
}


def heavy_modules_after(code: str) -> list[str]:
    report = f"import json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{report}"],
        cwd=ROOT,  # not tests/: a folder named like a library would shadow it
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_cheap_paths_import_no_heavy_library(case):
    assert heavy_modules_after(CASES[case]) == []
