"""Check code data: every reference solution must pass its own tests in the sandbox.

This is what `rvctl data check FILE --solutions FIELD` runs: proof, before any training
depends on it, that the loader built the right program and tests from each record, and that
the sandbox runs them (a missing module or a too-tight limit shows up here as a failure).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from rollverify.tasks.data.code_problems import CodeProblem, CodeSet
from rollverify.tasks.rewards.unit_tests import run_unit_tests


@dataclass(frozen=True)
class SolutionResult:
    """How one record's reference solution fared."""

    record: int  # index in the file
    task_id: str
    passed: int  # tests passed
    tests: int
    ok: bool  # all passed
    seconds: float
    error: str  # "" when ok; else the first failure, a timeout, or why there is no report


@dataclass(frozen=True)
class SolutionCheck:
    """How one file's reference solutions fared, in record order."""

    file: str
    field: str
    checked: int  # usable records with a solution, run
    passed: int  # of those, the ones that passed every test
    without_solution: int  # usable records whose solution field is missing or blank
    seconds: float  # wall time of the whole check
    results: list[SolutionResult]


def check_solutions(
    code_set: CodeSet,
    limit: int | None = None,
    workers: int = 1,
    timeout_s: float = 10.0,
    on_result: Callable[[SolutionResult], None] = lambda result: None,
) -> SolutionCheck:
    """Run the reference solution of each usable record (the first `limit`) against its tests,
    `workers` sandboxes at a time; `on_result` is called (in this thread) as each finishes."""
    field = _require_solutions(code_set)
    problems = code_set.problems[:limit]
    with_solution = [p for p in problems if p.solution is not None]
    start = time.perf_counter()
    results = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        running = [pool.submit(_check, problem, timeout_s) for problem in with_solution]
        for done in as_completed(running):
            results.append(done.result())
            on_result(results[-1])
    results.sort(key=lambda result: result.record)
    return SolutionCheck(
        file=code_set.file,
        field=field,
        checked=len(results),
        passed=sum(result.ok for result in results),
        without_solution=len(problems) - len(with_solution),
        seconds=round(time.perf_counter() - start, 2),
        results=results,
    )


def _require_solutions(code_set: CodeSet) -> str:
    """The solution field, or a ValueError in one line if no usable record has one."""
    field = code_set.solution_field
    if field is None:
        raise ValueError(f"{code_set.file}: read without a solution field; name one")
    if code_set.problems and not any(p.solution is not None for p in code_set.problems):
        raise ValueError(
            f"solution field {field!r}: no usable record of {code_set.file} has a solution "
            f"there; its records' fields: {', '.join(code_set.columns) or '(none)'} "
            "(HumanEval: canonical_solution; MBPP: code)"
        )
    return field


def _check(problem: CodeProblem, timeout_s: float) -> SolutionResult:
    run = run_unit_tests(problem.solution or "", problem.tests, timeout_s=timeout_s)
    return SolutionResult(
        problem.index,
        problem.task_id,
        run.passed,
        run.total,
        run.ok,
        round(run.seconds, 3),
        run.error,
    )
