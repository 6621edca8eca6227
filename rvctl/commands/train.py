"""`rvctl train` and `rvctl resume`: one GRPO run (any method) with live progress and a
one-screen summary."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from rollverify.training.preflight import check_before_start
from rvctl import progress
from rvctl.options import (
    EngineOption,
    FormatOption,
    ProcessesOption,
    RunOptions,
    SetOption,
    config_default,
    run_overrides,
    with_run_options,
)
from rvctl.output import Format, print_rows, stderr, stdout_for_results

CheckpointEveryOption = Annotated[
    int | None,
    typer.Option(
        help="Checkpoint every N steps (and at the end, and on Ctrl-C/SIGTERM).",
        show_default=config_default("train.checkpoint_every"),
    ),
]


@with_run_options
def train(
    run: RunOptions = RunOptions(),  # --config, --steps, ... (with_run_options)
    method: Annotated[
        str | None,
        typer.Option(
            help="The method: grpo, partial, rollverify or another of rvctl methods.",
            show_default=config_default("train.method"),
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed of data, sampling and init.", show_default=config_default("train.seed")
        ),
    ] = None,
    checkpoint_every: CheckpointEveryOption = None,
    no_eval: Annotated[
        bool,
        typer.Option(
            "--no-eval",
            help="Evaluate nothing, not even the base model (train.evaluate: false): a smoke "
            "run, with no accuracy to report.",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            help="Check everything (config, data, model, devices, disk) and print the memory "
            "per GPU and checkpoint size it needs; train nothing."
        ),
    ] = False,
    format: FormatOption = Format.table,
) -> None:
    """Train with GRPO, partial rollout or RollVerify; log everything to MLflow."""
    named = {"train.method": method, "train.seed": seed, "train.checkpoint_every": checkpoint_every}
    named["train.evaluate"] = False if no_eval else None
    run_config = run.load(**named)
    if dry_run:
        return _dry_run(run_config, format)
    check_before_start(run_config)  # in a second or two, before TRL, Ray or an engine load
    from rollverify.training.run import train as run_training  # heavy: torch, TRL, MLflow

    summary = _with_progress(
        run_config.train.method,
        run_config.train.steps,
        lambda on_step: run_training(run_config, on_step=on_step),
    )
    _print_summary(summary, format)


def resume(
    run_dir: Annotated[Path, typer.Argument(help="The run's folder (runs/<method>-s<seed>-...).")],
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Another config (default: the run's config.yaml)."),
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Train up to this step (extend a run).")] = None,
    engine: EngineOption = None,
    processes: ProcessesOption = None,
    checkpoint_every: CheckpointEveryOption = None,
    settings: SetOption = None,
    format: FormatOption = Format.table,
) -> None:
    """Continue a stopped or killed run from its last good checkpoint (or from step 0 if it
    was killed before its first), in its folder and MLflow run. RUN_DIR may be an output
    folder holding one run. A finished run: says so, exit 0."""
    overrides = run_overrides(
        steps=steps,
        engine=engine,
        processes=processes,
        settings=settings,
        **{"train.checkpoint_every": checkpoint_every},
    )
    from rollverify.training.resume_plan import RunFinished, resume_plan  # torch, not TRL

    try:
        plan = resume_plan(run_dir, overrides, config)
    except RunFinished as finished:  # a script that always resumes must not fail on it
        from rollverify.training.run_end import finished_run

        finished_run(finished.run_dir)  # its end completed, if a stop cut it off
        print(finished)
        return
    check_before_start(plan.config)  # before TRL, Ray or an engine load
    from rollverify.training.run import run  # heavy: TRL, MLflow

    summary = _with_progress(
        plan.run_dir.name,
        plan.config.train.steps,
        lambda on_step: run(dataclasses.replace(plan, on_step=on_step)),
    )
    _print_summary(summary, format)


def _with_progress(name: str, steps: int | None, run: Callable[[Callable], Any]) -> Any:
    """Run `run(on_step)` under a progress bar of steps (a line per step in a log); say how to
    go on if interrupted."""
    try:
        with stdout_for_results():
            return _run_shown(name, steps, run)
    except KeyboardInterrupt as interrupt:
        # Plain print: a path to copy must not be wrapped by rich.
        run_dir = getattr(interrupt, "run_dir", None)
        note = getattr(interrupt, "note", None)
        if run_dir is not None and note:
            print(
                f"interrupted: {note}; engines stopped, MLflow run KILLED; continue with: "
                f"rvctl resume {run_dir}",
                file=sys.stderr,
            )
        elif run_dir is not None:
            print(
                f"interrupted after step {interrupt.step}: checkpoint saved, engines stopped, "
                f"MLflow run KILLED; continue with: rvctl resume {run_dir}",
                file=sys.stderr,
            )
        else:
            print("interrupted: engines stopped, MLflow run marked KILLED", file=sys.stderr)
        raise


def _run_shown(name: str, steps: int | None, run: Callable[[Callable], Any]) -> Any:
    """`run(on_step)` under a progress bar of steps, or a line per step in a log."""
    if progress.plain():
        return run(progress.StepLines(name, steps))
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[live]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=stderr,
    ) as bar:
        task = bar.add_task(name, total=steps, live="starting")
        last = [time.perf_counter()]

        def show(step: int, metrics: dict[str, float]) -> None:
            now = time.perf_counter()
            rate = progress.throughput(metrics, now - last[0])
            last[0] = now
            live = "  ".join(p for p in (progress.figures(metrics), rate) if p)
            bar.update(task, completed=step, live=live)

        return run(show)


def _dry_run(run_config: Any, format: Format) -> None:
    """What the run needs, checked and estimated; its problems as errors (exit 2)."""
    from rollverify.config import ConfigError
    from rollverify.cost.memory_estimate import size
    from rollverify.training.preflight import preflight

    result = preflight(run_config)
    rows = [{"part": "check", "item": what, "value": found} for what, found in result.checks]
    memory = result.estimate
    if memory is not None:
        trainer = f"trainer GPU ({memory.gpu.name})"
        rows += [
            {"part": trainer, "item": name, "value": size(n)}
            for name, n in memory.trainer_parts.items()
        ]
        rows.append({"part": trainer, "item": "total", "value": size(memory.trainer_bytes)})
        if run_config.engine() == "vllm":
            engine = f"engine GPU ({memory.gpu.name})"
            rows.append({"part": engine, "item": "weights", "value": size(memory.engine_weights)})
            rows.append(
                {
                    "part": engine,
                    "item": "KV cache",
                    "value": f"{memory.kv_tokens:,} tokens (wanted: slots x max_model_len "
                    f"{memory.kv_tokens_wanted:,})",
                }
            )
        rows.append(
            {"part": "disk", "item": "one checkpoint", "value": size(memory.checkpoint_bytes)}
        )
    print_rows(rows, format, title="dry run (estimates; nothing was started)")
    if result.problems:
        raise ConfigError(result.problems)


def _print_summary(summary: Any, format: Format) -> None:
    rows = [{"field": k, "value": v} for k, v in asdict(summary).items()]
    print_rows(
        rows if format is Format.table else [asdict(summary)],
        format,
        title=f"{summary.method}, seed {summary.seed}",
    )
    if format is Format.table:
        stderr.print(f"MLflow: rvctl ui --tracking-uri {summary.tracking_uri}")
