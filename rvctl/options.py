"""Option aliases shared by commands, so one flag means one thing everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from rvctl.output import Format

FormatOption = Annotated[
    Format, typer.Option("--format", "-f", help="Output: a rich table, or json/csv/md.")
]

# The run options of `rvctl train`, which compare and sweep pass on to every run.
ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML config (a diff of the defaults).")
]
StepsOption = Annotated[int | None, typer.Option(help="Optimizer steps.")]
EngineOption = Annotated[
    str | None, typer.Option(help="Rollout engine: vllm, hf or auto (vllm where it imports).")
]
OutputOption = Annotated[Path | None, typer.Option(help="Output folder for runs.")]
ProcessesOption = Annotated[
    int | None,
    typer.Option(
        help="Trainer processes (train.processes): torchrun starts them on this machine.",
    ),
]
TrackingOption = Annotated[
    str | None, typer.Option(help="MLflow URI (default: sqlite in the output folder).")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Any config field, as key=value with a YAML value (repeatable): --set "
        "train.learning_rate=1e-6 --set train.micro_batch_size=null. Named options win.",
    ),
]


def run_overrides(
    steps: int | None,
    engine: str | None,
    output: Path | None,
    tracking_uri: str | None,
    processes: int | None = None,
    settings: list[str] | None = None,
    **named: Any,
) -> dict[str, Any]:
    """Config overrides from the shared run options, the `--set` items under the named
    options (`named`: more of them, as dotted fields; None: not given, keep the config's)."""
    from rollverify.config import parse_settings

    given = named | {
        "train.steps": steps,
        "train.processes": processes,
        "rollout.engine": engine,
        "output": str(output) if output is not None else None,
        "tracking.uri": tracking_uri,
    }
    return parse_settings(settings) | {k: v for k, v in given.items() if v is not None}
