"""`rvctl data ...`: look at the real math data and the reward that scores it."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from rollverify.data.math_problems import MATH_DATA_DIR, load_math_sets
from rvctl.options import FormatOption
from rvctl.output import Format, print_rows, stderr

app = typer.Typer(help="Real math data: load it, check the reward on it.", no_args_is_help=True)


@app.command("check")
def check(
    directory: Annotated[Path, typer.Argument(help="Folder of rllm-style *.json files.")] = (
        MATH_DATA_DIR
    ),
    limit: Annotated[
        int | None, typer.Option(min=1, help="Check at most this many records per file.")
    ] = None,
    format: FormatOption = Format.table,
) -> None:
    """Score every reference answer (must be 1) and a perturbed one (must be 0) per file."""
    from rollverify.data.answer_check import check_answers  # heavy: math-verify, sympy

    math_sets = load_math_sets(directory)
    total = sum(len(s.problems[:limit]) for s in math_sets)
    rows = []
    with Progress(console=stderr, transient=True) as progress:
        task = progress.add_task("checking answers", total=total)
        for math_set in math_sets:
            result = check_answers(math_set, limit, lambda: progress.advance(task))
            rows.append(asdict(result) | {"wrongly_accepted": len(result.wrongly_accepted)})
    print_rows(rows, format, title=f"math-verify reward on {directory}")
