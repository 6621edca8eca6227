"""Reward for code: does the program pass all of its unit tests in the sandbox? 1.0, else 0.0.

The code of a response is its last fenced Python block (```python, ```py or a bare ```; an
unclosed one runs to the end), else the whole response as it is (a completion that continues
the prompt, as HumanEval's base-model setting has it). The last block, as rllm's and
LiveCodeBench's extractors take it: a model shows its final version last.

One sandbox (rollverify/tools/sandbox.py) runs one harness: the program (the problem's prefix,
HumanEval's prompt, then the code), the tests' setup, then each test in turn, in one namespace;
a test passes when it runs without raising. The program's own output is swallowed, and the
harness reports on its saved stdout in a line that starts with a nonce it read from stdin
before the program ran, so a program cannot forge a pass by printing, by exiting early
(sys.exit is caught, os._exit leaves no report) or by replacing builtins (the harness holds its
own exec and compile). Not contained: a program that walks the harness's frames to read the
nonce, and tests a program can satisfy without solving (an object whose __eq__ is always true).
A timeout or a kill fails every test.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from rollverify.tools.sandbox import run_python

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
PYTHON_TAGS = frozenset({"python", "python3", "py", ""})  # "": a bare ``` block

# The harness, with its inputs as Python literals. {program}, {setup}, {tests}: repr()s.
_HARNESS = """\
import io, os, sys


def _why(error, _str=str):
    text = " ".join(_str(error).split())
    return _str(type(error).__name__) + (": " + text if text else "")


def _run(program, setup, tests, _exec=exec, _compile=compile, _str=str):
    namespace, passed, errors = {{"__name__": "solution"}}, 0, []
    try:
        _exec(_compile(program, "solution.py", "exec"), namespace)
        if setup:
            _exec(_compile(setup, "setup.py", "exec"), namespace)
    except BaseException as error:
        return 0, "program: " + _why(error)
    for number, test in enumerate(tests, 1):
        try:
            _exec(_compile(test, "test_" + _str(number) + ".py", "exec"), namespace)
            passed += 1
        except BaseException as error:
            errors.append("test " + _str(number) + ": " + _why(error))
    return passed, errors[0] if errors else ""


def _main(_write=os.write, _exit=os._exit, _str=str):
    nonce = sys.stdin.readline().strip()
    out = os.dup(1)
    sys.stdout = io.StringIO()  # the program's prints: not in the report's way
    passed, error = _run({program}, {setup}, {tests})
    line = nonce + " " + _str(passed) + " " + error[:500] + "\\n"
    _write(out, line.encode("utf-8", "replace"))
    _exit(0)  # the program's threads and atexit hooks end here


_main()
"""


@dataclass(frozen=True)
class UnitTests:
    """What a program must pass: each test is Python source that passes when it runs without
    raising (HumanEval: its `test` and `check(entry_point)`, one test; MBPP: one assert each)."""

    tests: tuple[str, ...]
    prefix: str = ""  # code the program starts with (HumanEval: the prompt), then the code
    setup: str = ""  # run after the program, before the tests (MBPP's test imports)


@dataclass(frozen=True)
class TestRun:
    """How one program fared against its tests."""

    __test__ = False  # (not a pytest class)

    passed: int  # tests passed (0 when the program did not run, timed out or was killed)
    total: int
    error: str  # "" when all passed; else the first failure, or why there is no report
    seconds: float

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.passed == self.total


def extract_code(response: str) -> str:
    """The response's last fenced Python block, else the response as it is (module doc)."""
    blocks = [body for tag, body in _FENCE.findall(response) if tag.lower() in PYTHON_TAGS]
    return blocks[-1] if blocks else response


def harness(code: str, tests: UnitTests) -> str:
    """The program that runs `code` (after the tests' prefix) and then the tests."""
    return _HARNESS.format(
        program=repr(tests.prefix + code), setup=repr(tests.setup), tests=repr(tests.tests)
    )


def run_unit_tests(
    code: str, tests: UnitTests, *, timeout_s: float = 10.0, memory_mb: int = 512
) -> TestRun:
    """Run `code` against `tests` in one sandbox (~0.2 s plus the tests' own time)."""
    nonce = secrets.token_hex(16)
    result = run_python(
        harness(code, tests), timeout_s=timeout_s, memory_mb=memory_mb, stdin=nonce + "\n"
    )
    total = len(tests.tests)
    if result.timed_out:
        return TestRun(0, total, f"timed out after {timeout_s:g} s", result.seconds)
    for line in reversed(result.stdout.splitlines()):
        tag, _, rest = line.partition(" ")
        if tag == nonce:
            passed, _, error = rest.partition(" ")
            return TestRun(min(int(passed), total), total, error, result.seconds)
    return TestRun(0, total, _no_report(result.stderr, result.exit_code), result.seconds)


def _no_report(stderr: str, exit_code: int | None) -> str:
    how = "killed" if exit_code is None else f"exit code {exit_code}"
    last = stderr.strip().splitlines()[-1:] or ["no output"]
    return f"no report ({how}): {last[0][:300]}"


def unit_tests_reward(
    response: str, tests: UnitTests, *, timeout_s: float = 10.0, memory_mb: int = 512
) -> float:
    """1.0 when the response's code passes every test in the sandbox, else 0.0."""
    run = run_unit_tests(extract_code(response), tests, timeout_s=timeout_s, memory_mb=memory_mb)
    return 1.0 if run.ok else 0.0
