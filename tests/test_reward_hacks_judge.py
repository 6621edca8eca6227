"""Hacks found trying the code reward as a policy would (issue 63), each beside the honest
solution, which passes: reading the tests from the sandbox's disk, an exception a test's
iteration takes for control flow, a reply that would crash the judge, and tampering that
hides behind a class's claimed module, a patched json.dumps or a tracer on the server. Each
scores 0; where it tampers, the judge counts it. tests/test_unprivileged.py runs this file
again as an unprivileged user."""

from __future__ import annotations

import pytest

from rollverify.tasks.rewards.unit_tests import UnitTests, run_unit_tests

HONEST = "def add(a, b):\n    return a + b\n"

# -- 1. the tests on the sandbox's disk ---------------------------------------------------------
# Finds HumanEval's problem by its function's name in every file it can read (gzip's too) and
# returns the values its asserts expect, as plain data.
READS_THE_TESTS = """
import gzip, json, os, re
expected = {}
for folder, _, names in os.walk("/"):
    if folder.startswith(("/proc", "/dev")):
        continue
    for name in names:
        try:
            if os.path.getsize(os.path.join(folder, name)) > 2**22:  # (its memory is small)
                continue
            data = open(os.path.join(folder, name), "rb").read()
            data = gzip.decompress(data) if name.endswith(".gz") else data
        except (OSError, EOFError, ValueError, MemoryError):
            continue
        if b'"entry_point": "' + b'has_close_elements"' not in data:
            continue
        for line in data.decode(errors="replace").splitlines():
            if '"entry_point": "' + 'has_close_elements"' in line:
                test = json.loads(line)["test"]
                for args, value in re.findall(r"candidate\\((.*?)\\) == (.*)", test):
                    expected[args.strip()] = value.strip()
def has_close_elements(*args):
    return eval(expected.get(", ".join(map(repr, args)), "None"))
"""


def test_a_program_that_reads_its_problems_tests_from_disk_scores_zero():
    from rollverify.tasks.data.code_problems import HUMANEVAL, load_code_set

    problems = load_code_set(HUMANEVAL, solution_field="canonical_solution").problems
    problem = next(p for p in problems if p.task_id == "HumanEval/0")  # has_close_elements
    assert run_unit_tests(problem.solution, problem.tests, timeout_s=10).ok
    cheat = "    return -1.0\n" + READS_THE_TESTS
    run = run_unit_tests(cheat, problem.tests, timeout_s=30)
    assert run.passed == 0 and "AssertionError" in run.error, run


# -- 2. exceptions a test's iteration would take for control flow -----------------------------
# Each passes for the honest add and would pass for a program whose add raises StopIteration
# (or StopAsyncIteration) if the judge raised that builtin in the test.
ITERATING = {
    "all(map)": "assert all(map(lambda a: add(a, 1) == a + 1, [1, 2]))",
    "filter": "assert not list(filter(lambda a: add(a, 1) != a + 1, [1, 2]))",
    "any(map)": "assert not any(map(lambda a: add(a, 1) != a + 1, [1, 2]))",
    "set(map)": "assert set(map(add, [1], [1])) <= {2}",
    "comprehension": "assert [b for b in map(lambda a: add(a, 1), [1]) if b != 2] == []",
    "generator": "def wrong():\n    yield from filter(lambda a: add(a, 1) != a + 1, [1, 2])\n"
    "assert not list(wrong())",
    "async for": """
import asyncio
class Wrong:
    left = [1, 2]
    def __aiter__(self):
        return self
    async def __anext__(self):
        if not self.left:
            raise StopAsyncIteration
        a = self.left.pop()
        return a if add(a, 1) != a + 1 else None
async def wrongs():
    return [a async for a in Wrong() if a]
assert asyncio.run(wrongs()) == []
""",
}
CONTROL_FLOW = ("StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt")


@pytest.mark.parametrize("shape", ITERATING)
def test_the_honest_solution_passes_tests_that_iterate(shape):
    assert run_unit_tests(HONEST, UnitTests((ITERATING[shape],)), timeout_s=10).ok


@pytest.mark.parametrize("exception", CONTROL_FLOW)
def test_a_control_flow_exception_from_the_program_fails_tests_that_iterate(exception):
    cheat = f"def add(a, b):\n    raise {exception}\n"
    run = run_unit_tests(cheat, UnitTests(tuple(ITERATING.values())), timeout_s=10)
    assert run.passed == 0 and f"CandidateError: {exception}" in run.error, run


# -- 3. replies that would crash the judge ------------------------------------------------------
# Lines the program writes on every descriptor it has (the judge's channel among them) before
# the server speaks: a first message, the answer to the judge's question about `to_int`, and
# the answer to its call, which the judge reads as the server's.
READY = '{"ready": true, "patched": []}'
FUNCTION = '{"found": {"to_int": ["function"]}}'
MALFORMED = {
    "bad hex in bytes": [READY, FUNCTION, '{"returned": {"bytes": "zz"}}'],
    "a complex too large": [READY, FUNCTION, '{"returned": {"complex": [1%s, 0]}}' % ("0" * 400)],
    "a name's value with bad hex": [READY, '{"found": {"to_int": ["value", {"bytes": "z"}]}}'],
    "builtins replaced, as a number": ['{"ready": true, "patched": 5}'],
    "a found that is a list": [READY, '{"found": {"to_int": [["x"], 1]}}'],
}
# The honest to_int raises ValueError on "x": a judge that let bytes.fromhex's ValueError out
# would pass this test for the program.
TO_INT = UnitTests(
    ("try:\n    to_int('x')\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError",)
)


def writes_first(lines: list[str]) -> str:
    data = "".join(line + "\n" for line in lines).encode()
    return (
        f"import os\nfor fd in range(1, 64):\n    try:\n        os.write(fd, {data!r})\n"
        "    except OSError:\n        pass\ndef to_int(s):\n    return int(s)\n"
    )


BAD_ENCODINGS = [
    {"bytes": "zz"},
    {"complex": [10**400, 0]},
    {"dict": [[[1], 2]]},
    {"set": [[1]]},
    {"tuple": 5},
    [{"nested": 1}],
    {"ref": 1.5},
]


@pytest.mark.parametrize("data", BAD_ENCODINGS, ids=str)
def test_every_malformed_encoding_is_not_plain_data_never_another_error(data):
    from rollverify.tasks.rewards.plain_data import NotPlain, decode

    with pytest.raises(NotPlain):
        decode(data, references=False)


@pytest.mark.parametrize("reply", MALFORMED)
def test_a_reply_the_judge_cannot_read_scores_zero_and_is_tampering(reply):
    assert run_unit_tests("def to_int(s):\n    return int(s)\n", TO_INT, timeout_s=10).ok
    run = run_unit_tests(writes_first(MALFORMED[reply]), TO_INT, timeout_s=10)
    assert run.passed == 0 and run.tampering, run
    assert "the judge failed" not in run.error, run


# -- 4. tampering whatever the class claims, whatever the program patches ----------------------
ADD = UnitTests(("assert add(1, 2) == 3", "assert add(2, 2) == 4"))
ALWAYS_EQUAL = """
class Anything(int):
    __module__ = "builtins"
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__
def add(a, b):
    return Anything(0)
"""
# Scrubs the server's tampering reports from a message it sends (keeping its shape).
SCRUB = (
    "def scrub(message):\n    if isinstance(message, dict):\n"
    "        message.pop('compares', None), message.pop('traced', None)\n"
    "        if 'patched' in message:\n            message['patched'] = []\n"
)
PATCHES_JSON = (
    SCRUB + "import json\nreal_dumps = json.dumps\n"
    "def dumps(message, **kw):\n    scrub(message)\n    return real_dumps(message, **kw)\n"
    "json.dumps = dumps\n"
)
TRACES_THE_SEND = (
    SCRUB + "import sys\ndef tracer(frame, event, arg):\n"
    "    for value in list(frame.f_locals.values()):\n        scrub(value)\n"
    "    return tracer\nsys.settrace(tracer)\n"
)
TAMPERING = {
    "a class that claims to be a builtin": ALWAYS_EQUAL,
    "json.dumps patched to drop the report": PATCHES_JSON + ALWAYS_EQUAL,
    "a tracer on the server's send": TRACES_THE_SEND + ALWAYS_EQUAL,
    "a tracer set in the call": ALWAYS_EQUAL.replace(
        "    return Anything(0)",
        f"    {TRACES_THE_SEND.replace(chr(10), chr(10) + '    ')}return Anything(0)",
    ),
}


@pytest.mark.parametrize("hack", TAMPERING)
def test_tampering_is_counted_whatever_the_class_claims_or_the_program_patches(hack):
    assert run_unit_tests(HONEST, ADD, timeout_s=10).ok
    run = run_unit_tests(TAMPERING[hack], ADD, timeout_s=10)
    assert run.passed == 0 and run.tampering, run


def test_the_standard_librarys_counter_still_comes_back_as_a_dict():
    """Counter defines comparison, but is no class of the program's: it is plain data."""
    counts = UnitTests(("assert count('abca') == {'a': 2, 'b': 1, 'c': 1}",))
    program = "from collections import Counter\ndef count(s):\n    return Counter(s)\n"
    run = run_unit_tests(program, counts, timeout_s=10)
    assert run.ok and run.tampering == "", run


# -- 5. a function named like a builtin ---------------------------------------------------------
# MBPP 126 asks for `sum(a, b)` (the sum of common divisors): the data says the tests' sum() is
# the program's. Where the data does not, a program's own `set` does not change the tests' set().
SUM_OF_DIVISORS = "def sum(a, b):\n    return 6 if (a, b) == (10, 15) else 3\n"
SET_TESTS = ("assert set(add(1, 2)) == set([3, 4])",)


def test_a_problems_function_named_like_a_builtin_is_the_programs():
    from rollverify.tasks.data.code_problems import shadowed_builtins

    tests = ("assert sum(10, 15) == 6", "assert sum(4, 6) == 3")
    shadows = shadowed_builtins("def sum(a, b):\n    s = 0\n    return s", tests)
    assert shadows == ("sum",)
    assert run_unit_tests(SUM_OF_DIVISORS, UnitTests(tests, shadows=shadows)).ok
    assert not run_unit_tests(SUM_OF_DIVISORS, UnitTests(tests)).ok  # the builtin's sum()


def test_a_program_that_redefines_a_builtin_the_tests_use_scores_zero():
    cheat = "def set(*args):\n    return 0\n\ndef add(a, b):\n    return None\n"
    run = run_unit_tests(cheat, UnitTests(SET_TESTS))
    assert run.passed == 0, run
    honest = "def add(a, b):\n    return [a + b, a + b + 1]\n"
    assert run_unit_tests(honest, UnitTests(SET_TESTS)).ok
