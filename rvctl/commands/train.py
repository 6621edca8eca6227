"""`rvctl train`: one GRPO run (any method) with live progress and a one-screen summary."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rvctl.options import (
    ConfigOption,
    EngineOption,
    FormatOption,
    OutputOption,
    StepsOption,
    TrackingOption,
    run_overrides,
)
from rvctl.output import Format, print_rows, stderr


def train(
    config: ConfigOption = None,
    method: Annotated[
        str | None, typer.Option(help="grpo, partial, rollverify, ... (rvctl methods lists them).")
    ] = None,
    steps: StepsOption = None,
    seed: Annotated[int | None, typer.Option(help="Seed of data, sampling and init.")] = None,
    engine: EngineOption = None,
    tracking_uri: TrackingOption = None,
    output: OutputOption = None,
    format: FormatOption = Format.table,
) -> None:
    """Train with GRPO, partial rollout or RollVerify; log everything to MLflow."""
    from rollverify.config import load_config

    overrides = {"train.method": method, "train.seed": seed}
    overrides |= run_overrides(steps, engine, output, tracking_uri)
    run_config = load_config(config, overrides)
    from rollverify.training.run import train as run_training  # heavy: torch, TRL, MLflow

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[live]}"),
        TimeElapsedColumn(),
        console=stderr,
    ) as progress:
        task = progress.add_task(
            run_config.train.method, total=run_config.train.steps, live="evaluating the base model"
        )

        def show(step: int, metrics: dict[str, float]) -> None:
            progress.update(task, completed=step, live=_live(metrics))

        try:
            summary = run_training(run_config, on_step=show)
        except KeyboardInterrupt:
            stderr.print("interrupted: engines stopped, MLflow run marked KILLED")
            raise
    rows = [{"field": k, "value": v} for k, v in asdict(summary).items()]
    print_rows(
        rows if format is Format.table else [asdict(summary)],
        format,
        title=f"{summary.method}, seed {summary.seed}",
    )
    if format is Format.table:
        stderr.print(f"MLflow: mlflow ui --backend-store-uri {summary.tracking_uri}")


def _live(metrics: dict[str, float]) -> str:
    parts = []
    for name, label in [
        ("reward_mean", "reward"),
        ("ops_mean", "OPS"),
        ("acceptance_rate", "accept"),
        ("eval_accuracy", "eval"),
    ]:
        value = metrics.get(name)
        if value is not None and not math.isnan(value):
            parts.append(f"{label} {value:.3f}")
    return "  ".join(parts)
