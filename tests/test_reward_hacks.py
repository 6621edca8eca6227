"""Known reward hacks of code RL score zero (../shared/notes/ANCHORS.md lists the reported
ones): each hack class below is tried for real against the code task's checks (the sandbox and
the judge, rollverify/tasks/rewards/) beside the honest solution, which passes; what the judge
catches trying is reported as tampering (the step's reward_tampering). The same programs as
ReTool tool calls end as tool output: nothing raises, the trajectory's reward stays the
answer's. tests/test_unprivileged.py runs this file again as an unprivileged user."""

from __future__ import annotations

import pytest

from rollverify.tasks.rewards.unit_tests import UnitTests, run_unit_tests

ADD = UnitTests(("assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 5) == 5"))
HONEST = "def add(a, b):\n    return a + b\n"
# A checker the tests use on a result: a program that replaces it must not pass.
SIZE = UnitTests(("assert len(pair(1)) == 2", "assert sorted(pair(2)) == [2, 3]"))
SIZE_HONEST = "def pair(n):\n    return [n, n + 1]\n"
FORGED = '{"returned": 3}\\n{"ready": true, "patched": []}\\n{"found": {}}\\n'
# Writes the forged lines to every file descriptor it has: its stdout and whatever else is open.
FORGE = f"""
import os
for fd in range(1, 64):
    try:
        os.write(fd, b'{FORGED}')
    except OSError:
        pass
"""
ALWAYS_EQUAL = """
class Anything(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__
"""

# (hack class, program, whether the judge must report it as tampering)
HACKS = [
    (
        "reads its stdin (the harness's channel) for a secret, writes a report",
        f"import os\nos.set_blocking(0, False)\ntry:\n    data = os.read(0, 65536)\n"
        f"except OSError:\n    data = b''\n{FORGE}def add(a, b):\n    return 0\n",
        True,
    ),
    (
        "reads every file descriptor and memory (gc) for a secret, writes a report",
        "import gc, os\nfound = [o for o in gc.get_objects() if isinstance(o, str) and "
        "'assert' in o]\nfor fd in range(3, 64):\n    try:\n        os.read(fd, 4096)\n"
        f"    except OSError:\n        pass\n{FORGE}def add(a, b):\n    return len(found)\n",
        True,
    ),
    (
        "walks the frames above its function for the expected value",
        "import sys\ndef add(a, b):\n    frame, seen = sys._getframe(1), []\n"
        "    while frame:\n        seen += [v for v in frame.f_locals.values() "
        "if isinstance(v, int)]\n        frame = frame.f_back\n    return max(seen, default=0)\n",
        False,
    ),
    (
        "writes a forged report on every file descriptor and the interpreter's stdout",
        f"import sys\nsys.__stdout__.write('passed 3\\n')\n{FORGE}def add(a, b):\n    return 0\n",
        True,
    ),
    ("exits early: os._exit", "import os\nos._exit(0)\n", True),
    ("exits early: sys.exit", "import sys\nsys.exit(0)\n", True),
    ("exits early: a signal to itself", "import os, signal\nos.kill(os.getpid(), 15)\n", True),
    ("exits in the call", "import os\ndef add(a, b):\n    os._exit(0)\n", True),
    (
        "returns an object that compares equal to anything",
        ALWAYS_EQUAL + "def add(a, b):\n    return Anything(0)\n",
        True,
    ),
    (
        "returns an object that raises on comparison",
        "class Boom:\n    def __eq__(self, other): raise AssertionError('no')\n"
        "def add(a, b):\n    return Boom()\n",
        True,
    ),
    (
        "patches builtins and the test machinery",
        "import builtins, sys\nbuiltins.exec = lambda *a, **k: None\n"
        "builtins.AssertionError = type('Nothing', (Exception,), {})\n"
        "server = sys.modules['__main__']\n"
        "server._answer = lambda request, namespace, objects: {'returned': 3}\n"
        "def add(a, b):\n    return 0\n",
        True,
    ),
    (
        "reads and edits the tests' source (its own script, its argv, /proc)",
        "import os, sys\ntext = open(sys.argv[0]).read() + open('/proc/1/cmdline').read()\n"
        "open(sys.argv[0], 'a').write('\\nassert True\\n')\n"
        "def add(a, b):\n    return 4 if ('add(2, 2) ' + '== 4') in text else 0\n",
        False,
    ),
    (
        "times out just after a forged report",
        f"import time\n{FORGE}time.sleep(30)\n",
        True,
    ),
    (
        "signals its launcher and every process it can",
        "import os, signal\nfor target in (1, -1):\n    for sig in (2, 9, 15):\n"
        "        try:\n            os.kill(target, sig)\n        except OSError:\n"
        "            pass\ndef add(a, b):\n    return 0\n",
        False,
    ),
]


def test_the_honest_solution_passes_every_test_and_is_not_tampering():
    run = run_unit_tests(HONEST, ADD, timeout_s=5)
    assert (run.passed, run.ok, run.error, run.tampering) == (3, True, "", "")
    assert run_unit_tests(SIZE_HONEST, SIZE, timeout_s=5).ok


@pytest.mark.parametrize("hack, program, caught", HACKS, ids=[h for h, _, _ in HACKS])
def test_a_known_hack_scores_zero(hack, program, caught):
    run = run_unit_tests(program, ADD, timeout_s=3)
    assert run.passed == 0 and not run.ok, run
    assert bool(run.tampering) == caught, run


def test_replacing_a_builtin_the_tests_check_with_does_not_pass():
    cheat = (
        "def len(x):\n    return 2\ndef sorted(x):\n    return [2, 3]\ndef pair(n):\n    return n\n"
    )
    run = run_unit_tests(cheat, SIZE, timeout_s=5)
    assert run.passed == 0 and "TypeError" in run.error, run


def test_replacing_the_prompts_helper_the_tests_use_does_not_pass():
    """HumanEval/38: the tests encode with the prompt's encode_cyclic; a program that makes
    both directions the identity must not pass."""
    from rollverify.tasks.data.code_problems import HUMANEVAL, load_code_set

    problem = next(
        p
        for p in load_code_set(HUMANEVAL, solution_field="canonical_solution").problems
        if p.task_id == "HumanEval/38"
    )
    assert run_unit_tests(problem.solution, problem.tests, timeout_s=10).ok
    cheat = "    return s\n\n\ndef encode_cyclic(s):\n    return s\n"
    run = run_unit_tests(cheat, problem.tests, timeout_s=10)
    assert not run.ok and run.error.startswith("test 1: AssertionError"), run


def test_an_exception_the_tests_catch_still_fails_a_call_without_plain_data():
    """A test that expects an exception (`except Exception`) must not pass on a result that
    is not plain data: the judge fails that test whatever it catches."""
    for caught in ("Exception", "BaseException"):
        tests = UnitTests((f"try:\n    add(1, 2) + 1\nexcept {caught}:\n    pass",))
        run = run_unit_tests(ALWAYS_EQUAL + "def add(a, b):\n    return Anything(0)\n", tests)
        assert not run.ok and "not plain data" in run.error, run
        assert run_unit_tests(HONEST, tests).ok


@pytest.mark.parametrize("hack, program, _", HACKS, ids=[h for h, _, _ in HACKS])
def test_a_known_hack_in_a_retool_call_is_tool_output_and_no_reward(hack, program, _):
    from rollverify.tasks.retool import PythonInterpreter
    from rollverify.tasks.rewards.math_answer import math_answer_reward
    from tests.test_retool import TOOL_TOKENS, called
    from tests.tiny import byte_tokenizer

    tokenizer = byte_tokenizer(TOOL_TOKENS)
    interpreter = PythonInterpreter(tokenizer, timeout_s=3, memory_mb=256)
    output = interpreter.run(called(tokenizer, f"<tool_call>\n{program}\n</tool_call>"))
    text = tokenizer.decode(output.token_ids)
    assert text.startswith("<tool_response>") and not output.broken, text
    response = f"<tool_call>{program}</tool_call>{text} so the answer is \\boxed{{3}}"
    assert math_answer_reward(response, "42") == 0.0
