"""`rvctl preconditions`: does a setting meet the staleness study's preconditions (docs/results.md,
"A setting where stale tokens can matter")? The starting policy measured, and with --store the
study's runs read (rollverify/experiments/preconditions.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rvctl.options import FormatOption, SetOption
from rvctl.output import Format, print_rows, stderr


def preconditions(
    config: Annotated[
        Path, typer.Option("--config", "-c", help="The setting's YAML config.", show_default=False)
    ],
    settings: SetOption = None,
    store: Annotated[
        Path | None,
        typer.Option(
            help="An MLflow sqlite file holding the study's runs: their stale shares "
            "and whether grpo stayed stable on every seed.",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Also write every figure (and each run's) to this JSON file.", show_default=False
        ),
    ] = None,
    format: FormatOption = Format.table,
) -> None:
    """The starting policy's entropy, sampled accuracy and length tail; the study's runs."""
    import torch

    from rollverify.config import load_config, parse_settings
    from rollverify.experiments.preconditions import from_store, method_rows, starting_policy
    from rollverify.infra.atomic_write import atomic_write_text

    if store is not None and not store.is_file():
        raise FileNotFoundError(f"--store: {store} is not a file; give the study's MLflow .db")
    torch.set_num_threads(1)
    overrides = parse_settings(settings)
    run_config = load_config(str(config), overrides=overrides)
    result = {"config": str(config), "overrides": overrides}
    result["policy"] = starting_policy(run_config)
    if store is not None:
        result |= from_store(str(store))
    if format is Format.json:
        print(json.dumps(result, indent=2))
    else:
        figures = [
            {"figure": key, "value": f"{value:.4g}" if isinstance(value, float) else str(value)}
            for key, value in result["policy"].items()
        ]
        print_rows(figures, format, title=f"the starting policy of {config}")
        if store is not None:
            print_rows(method_rows(result["runs"]), format, title="the study's runs")
    if out is not None:
        atomic_write_text(out, json.dumps(result, indent=2) + "\n")
        stderr.print(f"wrote {out}", markup=False, highlight=False)
