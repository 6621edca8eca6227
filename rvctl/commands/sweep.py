"""`rvctl sweep ds dt`: a grid of runs on Ray Tune (sweeps/ds_dt.yaml; `--ds 0.005,0.01`
replaces a field's values), one MLflow parent, resumable with `--resume`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rvctl import progress
from rvctl.options import FormatOption, RunOptions, with_run_options
from rvctl.output import Format, stderr, stdout_for_results

# `--ds 0.005,0.01`: values for any swept name, so the options cannot be declared up front.
CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


@with_run_options
def sweep(
    context: typer.Context,
    names: Annotated[list[str], typer.Argument(help="Config fields to sweep: ds dt, window ...")],
    run: RunOptions = RunOptions(),  # --config, --steps, ... (with_run_options)
    method: Annotated[
        str | None,
        typer.Option(
            help="Method of every trial (default: the sweep file's `method`); when the sweep's "
            "names include method, the methods it sweeps (--method grpo,partial)."
        ),
    ] = None,
    seeds: Annotated[
        int | None,
        typer.Option(help="Seeds per grid point (default: the sweep file's `seeds`)."),
    ] = None,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: a private local Ray).")
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Resume the latest sweep of these names in the output folder.")
    ] = False,
    sweep_dir: Annotated[
        Path | None, typer.Option(help="Resume this sweep folder (implies --resume).")
    ] = None,
    format: FormatOption = Format.table,
) -> None:
    """Run a grid of trainings (one Ray Tune trial each) and print the grid's table."""
    from rollverify.experiments.sweep import check_grid, load_grid

    # click hands unknown options (--ds ...) to the NAMES argument: split them off again
    words = [*names, *context.args]
    first_option = next((i for i, w in enumerate(words) if w.startswith("--")), len(words))
    names, values = words[:first_option], _value_options(words[first_option:])
    if not names:
        raise ValueError("sweep: name the fields to sweep, e.g. rvctl sweep ds dt")
    if method is not None and {"method", "train.method"} & set(names):
        values["method"] = method  # sweeping methods: --method lists them (--method a,b)
        method = None
    run_config = run.load()
    grid = load_grid(names, values, seeds, method)
    swept_methods = "train.method" in grid.values
    if method is not None and swept_methods:
        raise ValueError("--method: this grid sweeps train.method itself; drop --method")
    if method is None and not swept_methods and grid.method != run_config.train.method:
        stderr.print(
            f"sweep: every trial runs {grid.method} (the sweep file's method), not the "
            f"config's {run_config.train.method}; --method chooses"
        )
    folder = sweep_dir or (_latest(Path(run_config.output), names) if resume else None)
    check_grid(run_config, grid, address)  # every point and the address, before the display

    from rollverify.experiments.sweep import sweep as run_sweep  # heavy: Ray, torch, TRL, MLflow

    title = "sweep " + " x ".join(names)
    try:
        with stdout_for_results():  # (-f json: one document on stdout)
            if progress.plain():  # a log: a line per finished trial
                started, shown = time.perf_counter(), [-1]

                def show(done: int, total: int) -> None:  # (asked every few seconds)
                    if done != shown[0]:
                        shown[0] = done
                        seconds = time.perf_counter() - started
                        progress.line(f"{title}: {done}/{total} trials finished  {seconds:.0f} s")

                result = run_sweep(
                    run_config, grid, folder=folder, address=address, on_progress=show
                )
            else:
                with Progress(
                    TextColumn(f"[bold]{title}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=stderr,
                ) as bar:
                    task = bar.add_task("trials", total=grid.size)
                    result = run_sweep(
                        run_config,
                        grid,
                        folder=folder,
                        address=address,
                        on_progress=lambda done, total: bar.update(task, completed=done),
                    )
    except KeyboardInterrupt:
        stderr.print("interrupted: resume with --resume (finished trials are kept)")
        raise
    from rvctl.commands.report import show_report

    show_report([str(result.folder)], result.tracking_uri, format)
    if format is Format.table:
        stderr.print(f"sweep folder: {result.folder}")


def _value_options(args: list[str]) -> dict[str, str]:
    """["--ds", "0.005,0.01", "--dt=1,2"] -> {"ds": "0.005,0.01", "dt": "1,2"}."""
    values: dict[str, str] = {}
    rest = list(args)
    while rest:
        option = rest.pop(0)
        if not option.startswith("--"):
            raise ValueError(f"sweep: unexpected argument {option!r}; values go as --NAME v1,v2")
        name, _, value = option[2:].partition("=")
        if not value:
            if not rest:
                raise ValueError(f"--{name}: needs values, e.g. --{name} 0.005,0.01")
            value = rest.pop(0)
        values[name] = value
    return values


def _latest(output: Path, names: list[str]) -> Path:
    from rollverify.experiments.compare import latest_parent

    pattern = "sweep-" + "-".join(n.rsplit(".", 1)[-1] for n in names) + "-*"
    return latest_parent(output, pattern, "sweep")
