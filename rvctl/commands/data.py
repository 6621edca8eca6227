"""`rvctl data ...`: look at math data (the shipped sets or a file of your own) and the reward
that scores it."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from rollverify.infra.paths import locate
from rollverify.tasks.data.math_problems import (
    MATH_DATA_DIR,
    MathSet,
    load_math_set,
    load_math_sets,
)
from rollverify.tasks.data.records import FORMATS, SAVED_DATASET_FILES
from rvctl.options import FormatOption
from rvctl.output import Format, print_rows, stderr

app = typer.Typer(help="Real math data: load it, check the reward on it.", no_args_is_help=True)

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


@app.command("check", short_help="What a data file yields: usable and skipped rows.")
def check(
    path: Annotated[
        Path,
        typer.Argument(
            help="A data file (.json list or lines, .jsonl, .parquet, .csv) or a folder written "
            "by Dataset.save_to_disk: how many records are usable, and why the others are "
            "skipped (exit 2 if none is usable). A folder of rllm-style *.json files (default: "
            "the shipped sets): math-verify scores every reference answer."
        ),
    ] = MATH_DATA_DIR,
    prompt_field: PromptFieldOption = None,
    answer_field: AnswerFieldOption = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Folders: score at most this many records per file.")
    ] = None,
    format: FormatOption = Format.table,
) -> None:
    """What a data file yields (usable / skipped, by reason), or, for a folder of JSON files,
    the reward on it: every reference answer must score 1, a perturbed one 0."""
    path = locate(path) or path  # data/math/... : the package's data, from any folder
    saved = any((path / name).is_file() for name in SAVED_DATASET_FILES)
    if (path.is_dir() and not saved) or (not path.exists() and path.suffix.lower() not in FORMATS):
        _score_folder(path, prompt_field, answer_field, limit, format)
        return
    math_set = load_math_set(path, prompt_field, answer_field)
    _print_report(math_set, format)
    math_set.require_usable()  # nothing usable: one line naming the most common reason, exit 2


def _print_report(math_set: MathSet, format: Format) -> None:
    report = {
        "file": math_set.file,
        "records": math_set.records,
        "usable": len(math_set.problems),
        "skipped": math_set.skipped,
        "reasons": math_set.reasons,
        "examples": math_set.examples,  # reason -> index of the first record skipped for it
        "fields": math_set.fields_used,  # prompt/answer -> field -> usable records
    }
    if format is Format.json:
        print(json.dumps(report, indent=2))
        return
    rows = [
        {"reason": reason, "records": count, "example record": math_set.examples[reason]}
        for reason, count in math_set.reasons.items()
    ]
    if format is not Format.table:
        print_rows(rows, format)
        return
    # Plain print: rich would wrap a long path and read [brackets] in it as markup.
    usable, skipped = len(math_set.problems), math_set.skipped
    print(f"{math_set.file}: {math_set.records} records, {usable} usable, {skipped} skipped")
    for part, counts in math_set.fields_used.items():
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
