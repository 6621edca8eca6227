"""Reward for code: does the program pass all of its unit tests in the sandbox? 1.0, else 0.0.

The code of a response is its last fenced Python block (```python, ```py or a bare ```; an
unclosed one runs to the end), else the whole response as it is (a completion that continues
the prompt, as HumanEval's base-model setting has it). The last block, as rllm's and
LiveCodeBench's extractors take it: a model shows its final version last.

The verdict is not the program's to reach. The program runs in a sandbox
(rollverify/tools/sandbox.py) behind a small server (candidate_server.py); the tests run in a
trusted process of their own outside it (judge.py), against stand-ins for the program's
functions whose calls cross to the sandbox and whose results come back as plain data only
(plain_data.py: numbers, strings, bytes, lists, tuples, dicts, sets, booleans, None). Nothing
the program prints, reads, patches, exits with or returns can mark a test passed: an object
whose __eq__ is always true never reaches the tests, there is no report line or secret to
forge, and the tests' source is neither in the sandbox nor on the disk it sees (an empty root
with the interpreter and the standard library). A timeout or a kill fails every test.
What the judge caught the program trying is `TestRun.tampering` (the task counts it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rollverify.tasks.rewards.candidate_server import server_program
from rollverify.tools.sandbox import Sandbox, SandboxResult

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
PYTHON_TAGS = frozenset({"python", "python3", "py", ""})  # "": a bare ``` block
ROOT = str(Path(__file__).resolve().parents[3])  # the folder this rollverify is in
# The judge: a fresh interpreter (-I: no PYTHONPATH, no current folder) importing this checkout.
JUDGE = f"import sys; sys.path.insert(0, {ROOT!r}); import rollverify.tasks.rewards.judge as judge"
JUDGE += "; judge.main()"


@dataclass(frozen=True)
class UnitTests:
    """What a program must pass: each test is Python source that passes when it runs without
    raising (HumanEval: its `test` and `check(entry_point)`, one test; MBPP: one assert each)."""

    tests: tuple[str, ...]
    prefix: str = ""  # code the program starts with (HumanEval: the prompt), then the code
    setup: str = ""  # run after the program, before the tests (MBPP's test imports)
    entry_point: str = ""  # the prefix's function the program completes (HumanEval's)
    # builtins' names that the problem's own function takes (MBPP 126's `sum`): the tests' calls
    # of them are the program's. From the data, never the program: a program that defines
    # `set` does not thereby change what the tests' set() is
    shadows: tuple[str, ...] = ()


@dataclass(frozen=True)
class TestRun:
    """How one program fared against its tests."""

    __test__ = False  # (not a pytest class)

    passed: int  # tests passed (0 when the program did not run, timed out or was killed)
    total: int
    error: str  # "" when all passed; else the first failure, or why there is no verdict
    seconds: float
    tampering: str = ""  # what the judge caught the program trying ("" when nothing)

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.passed == self.total


def extract_code(response: str) -> str:
    """The response's last fenced Python block, else the response as it is (module doc)."""
    blocks = [body for tag, body in _FENCE.findall(response) if tag.lower() in PYTHON_TAGS]
    return blocks[-1] if blocks else response


def run_unit_tests(
    code: str, tests: UnitTests, *, timeout_s: float = 10.0, memory_mb: int = 512
) -> TestRun:
    """Run `code` against `tests`: the program in one sandbox, the tests in the judge (module
    doc). SandboxError if the sandbox itself failed (the caller decides what that costs)."""
    job = {"prefix": tests.prefix, "entry_point": tests.entry_point, "tests": list(tests.tests)}
    job["shadows"] = list(tests.shadows)
    program = server_program(tests.prefix + code, tests.setup)
    to_program, from_program = os.pipe(), os.pipe()  # (read, write) each
    limits = {"timeout_s": timeout_s, "memory_mb": memory_mb}
    with Sandbox(program, **limits, stdin=to_program[0], stdout=from_program[1]) as sandbox:
        os.close(to_program[0]), os.close(from_program[1])  # the sandbox's now
        verdict = _judge(job, to_program[1], from_program[0], sandbox.started + timeout_s)
        ran = sandbox.result()
    return _test_run(verdict, ran, len(tests.tests), timeout_s)


def _judge(job: dict, to_program: int, from_program: int, deadline: float) -> dict | None:
    """The judge's verdict, or None if it ran out of time (the program hung a call)."""
    judge = subprocess.Popen(
        [sys.executable, "-I", "-c", JUDGE, str(to_program), str(from_program)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        pass_fds=(to_program, from_program),
    )
    os.close(to_program), os.close(from_program)  # the judge's now: it ends the program's stdin
    try:
        out, _ = judge.communicate(json.dumps(job).encode(), max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        judge.kill()
        judge.communicate()
        return None
    return json.loads(out) if judge.returncode == 0 else {"error": "the judge failed"}


def _test_run(verdict: dict | None, ran: SandboxResult, total: int, timeout_s: float) -> TestRun:
    tampering = list((verdict or {}).get("tampering", []))
    if verdict is None or ran.timed_out:  # what the judge caught before counts still
        why = f"timed out after {timeout_s:g} s"
        return TestRun(0, total, why, ran.seconds, "; ".join(dict.fromkeys(tampering)))
    if verdict.get("ended") and _ended_by_itself(ran):
        tampering.append(f"ended during the tests ({_how_it_ended(ran)})")
    passed = min(int(verdict.get("passed", 0)), total)
    error = verdict.get("error", "")
    if verdict.get("ended") and passed < total and not error:
        error = f"no verdict ({_how_it_ended(ran)}): {_last_line(ran.stderr)}"
    return TestRun(passed, total, error, ran.seconds, "; ".join(dict.fromkeys(tampering)))


def _ended_by_itself(ran: SandboxResult) -> bool:
    """An exit, or a signal other than SIGKILL (the limits' and the timeout's)."""
    return ran.exit_code is not None or ran.signal not in (None, signal.SIGKILL)


def _how_it_ended(ran: SandboxResult) -> str:
    if ran.exit_code is not None:
        return f"exit code {ran.exit_code}"
    return f"killed by signal {ran.signal}" if ran.signal else "killed"


def _last_line(stderr: str) -> str:
    return (stderr.strip().splitlines()[-1:] or ["no output"])[0][:300]


def unit_tests_reward(
    response: str, tests: UnitTests, *, timeout_s: float = 10.0, memory_mb: int = 512
) -> float:
    """1.0 when the response's code passes every test in the sandbox, else 0.0."""
    run = run_unit_tests(extract_code(response), tests, timeout_s=timeout_s, memory_mb=memory_mb)
    return 1.0 if run.ok else 0.0
