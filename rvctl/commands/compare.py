"""`rvctl compare grpo partial rollverify`: every (method, seed) under one MLflow parent run,
a live table while they train, then the cost table of `rvctl report`."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from rollverify.tracking.metric_names import LIVE
from rvctl import progress
from rvctl.options import FormatOption, RunOptions, WideOption, with_run_options
from rvctl.output import Format, stderr, stdout_for_results


@with_run_options
def compare(
    methods: Annotated[list[str], typer.Argument(help="Methods to compare (rvctl methods).")],
    seeds: Annotated[int, typer.Option(help="Seeds per method (config seed, +1, ...).")] = 1,
    run: RunOptions = RunOptions(),  # --config, --steps, ... (with_run_options)
    plots: Annotated[
        bool, typer.Option(help="Also write the report's PNG curves into the compare folder.")
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            help="Go on with the latest comparison in the output folder: finished pairs are "
            "kept, stopped ones resume from their checkpoints, the rest start."
        ),
    ] = False,
    compare_dir: Annotated[
        Path | None, typer.Option(help="Go on with this comparison folder (implies --resume).")
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            help="A Ray cluster ('auto' inside one): the pairs run there side by side, one Ray "
            "task each (default: one after another here, sharing one engine)."
        ),
    ] = None,
    format: FormatOption = Format.table,
    wide: WideOption = False,
    frontier: Annotated[
        bool,
        typer.Option(
            "--frontier",
            help="Also print the cost-accuracy frontier against grpo (rvctl report --frontier); "
            "with --plots, frontier.png.",
        ),
    ] = False,
) -> None:
    """Train every method for every seed, then print the cost table."""
    from rollverify.experiments.compare import (
        Child,
        check_comparison,
        check_pairs,
        comparison_tags,
        latest_comparison,
        plan,
    )

    if frontier and format in (Format.json, Format.csv):  # one document on stdout, not two
        raise ValueError(
            f"--frontier: a second table after the report, not one {format} document; run "
            f"rvctl report FOLDER --frontier -f {format} after the comparison instead"
        )
    run_config = run.load()
    children = plan(methods, seeds, run_config.train.seed)  # bad names fail before any work
    folder = compare_dir or (latest_comparison(Path(run_config.output)) if resume else None)
    if folder is not None:
        check_comparison(folder, comparison_tags(methods, seeds))
    check_pairs(run_config, children, address)  # before the live display, in a second or two
    board = Board(children, run_config.train.steps)
    live = None if progress.plain() else Live(board.view(), console=stderr, refresh_per_second=4)

    def show(child: Child, step: int, metrics: dict[str, float]) -> None:
        board.update(child, step, metrics)
        if live is not None:
            live.update(board.view())
        elif step < 0:  # a log: a line per step, and one per finished run
            board.lines[child].start()
        else:
            board.lines[child](step, metrics)
            if step >= run_config.train.steps:
                progress.line(f"{child.name} finished")

    from rollverify.experiments.compare import compare as run_compare  # heavy: torch, TRL, MLflow

    try:
        with stdout_for_results(), live or contextlib.nullcontext():
            result = run_compare(
                run_config,
                methods,
                seeds,
                on_progress=show,
                resume_folder=folder,
                address=address,
            )
    except KeyboardInterrupt:
        stderr.print(
            "interrupted: engines stopped, MLflow runs marked KILLED; continue with: rvctl "
            "compare ... --resume (the same methods and options)"
        )
        raise
    from rvctl.commands.report import show_report

    show_report(
        [str(result.folder)],
        result.tracking_uri,
        format,
        plots_dir=result.folder / "plots" if plots else None,
        wide=wide,
    )
    if frontier:
        from rollverify.tracking.run_records import load_report
        from rvctl.commands.report_study import show_study

        runs = load_report([str(result.folder)], result.tracking_uri).runs
        plots_dir = result.folder / "plots" if plots else None
        for path in show_study(runs, "grpo", None, None, format, None, plots_dir, frontier=True):
            stderr.print(f"wrote {path}", markup=False, highlight=False)
    if format is Format.table:
        stderr.print(f"compare folder: {result.folder}")
        if plots:
            stderr.print(f"plots: {result.folder / 'plots'}")
        stderr.print(f"MLflow: rvctl ui --tracking-uri {result.tracking_uri}")


class Board:
    """The live table, one row per (method, seed), over a bar of the whole comparison's steps
    with its time left (from the steps so far: the first run's eval and start count too)."""

    def __init__(self, children, steps: int) -> None:
        self.steps = steps
        self.rows = {c: {"status": "waiting", "step": 0} for c in children}
        self.lines = {c: progress.StepLines(c.name, steps) for c in children}  # in a log
        self.bar = Progress(
            TextColumn("all runs"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} steps"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
        )
        self.total = self.bar.add_task("compare", total=steps * len(children))

    def update(self, child, step: int, metrics: dict[str, float]) -> None:
        row = self.rows[child]
        if step < 0:
            row["status"] = "running"
            return
        row["step"] = step
        row.update({k: v for k, v in metrics.items() if not _missing(v)})
        if step >= self.steps:
            row["status"] = "done"
        self.bar.update(self.total, completed=self.steps_done())

    def steps_done(self) -> int:
        return sum(row["step"] for row in self.rows.values())

    def view(self) -> Group:
        return Group(self.table(), self.bar)

    def table(self) -> Table:
        table = Table(title="rvctl compare")
        for column in ["run", "status", "step", *(label for _, label in LIVE)]:
            table.add_column(column, justify="left" if column in ("run", "status") else "right")
        for child, row in self.rows.items():
            cells = [f"{row[name]:.4g}" if name in row else "-" for name, _ in LIVE]
            table.add_row(child.name, row["status"], f"{row['step']}/{self.steps}", *cells)
        return table


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
