"""The kill-anywhere tests' hook (rollverify/infra/kill_points.py): every point a test can ask
for is one the code reaches, each call site names a listed point, and the process dies exactly
at the point, step, count and rank asked for."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rollverify.infra.kill_points import ENVIRONMENT, POINTS, kill_point

PACKAGE = Path(__file__).parents[1] / "rollverify"


def call_sites() -> dict[str, list[str]]:
    """Point name -> the files whose code calls kill_point with it (a literal, one line)."""
    sites: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "kill_point":
                name = node.args[0]
                assert isinstance(name, ast.Constant), f"{path}:{node.lineno}: name it literally"
                assert node.lineno == node.end_lineno, f"{path}:{node.lineno}: one line"
                sites.setdefault(name.value, []).append(str(path.relative_to(PACKAGE)))
    return sites


def test_every_listed_point_is_reached_by_the_code_and_every_call_names_a_listed_one():
    sites = call_sites()
    assert set(sites) == set(POINTS), set(sites) ^ set(POINTS)
    assert len(sites["weights-in-flight"]) == 2  # both engines that take weights in flight


def killed(wanted: str, calls: list[tuple[str, int]], rank: str = "0") -> bool:
    """Whether a process that reaches `calls` in order dies of SIGKILL under `wanted`."""
    program = "from rollverify.infra.kill_points import kill_point\n" + "".join(
        f"kill_point({point!r}, {step})\n" for point, step in calls
    )
    env = os.environ | {ENVIRONMENT: wanted, "RANK": rank}
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True)
    assert done.returncode in (0, -signal.SIGKILL), done.stderr.decode()
    return done.returncode == -signal.SIGKILL


def test_the_process_dies_at_the_point_step_count_and_rank_asked_for():
    assert killed("train:2", [("train", 1), ("train", 2)])
    assert not killed("train:3", [("train", 1), ("train", 2)])  # never at step 3
    assert not killed("train:2", [("rollout", 2), ("checkpoint-write", 5)])  # another point
    assert killed("rollout:1#3", [("rollout", 1)] * 3)
    assert not killed("rollout:1#3", [("rollout", 1)] * 2)  # reached twice, not three times
    assert not killed("rollout:2#2", [("rollout", 1), ("rollout", 2)])  # step 1's is not counted
    assert not killed("train:1@1", [("train", 1)], rank="0")
    assert killed("train:1@1", [("train", 1)], rank="1")


def test_a_point_no_code_reaches_is_refused(monkeypatch):
    monkeypatch.setenv(ENVIRONMENT, "checkpoint-writes:4")  # a typo: it would pass for nothing
    with pytest.raises(ValueError, match="no kill point 'checkpoint-writes'; one of setup"):
        kill_point("train", 4)
    monkeypatch.delenv(ENVIRONMENT)
    kill_point("train", 4)  # unset: nothing
