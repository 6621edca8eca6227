"""Option aliases shared by commands, so one flag means one thing everywhere."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from rvctl.output import Format


def config_default(key: str) -> str:
    """What --help shows as an option's default: the config field it sets and that field's
    built-in value, "(train.steps: 60)" (a config file or --set may change it)."""
    import dataclasses

    from rollverify.config.run_config import RunConfig

    owner, name = (RunConfig, key) if "." not in key else key.split(".")
    if owner is not RunConfig:
        owner = {f.name: f.type for f in dataclasses.fields(RunConfig)}[owner]
        owner = owner if isinstance(owner, type) else getattr(RunConfig(), key.split(".")[0])
    field = {f.name: f for f in dataclasses.fields(owner)}[name]
    value = (
        field.default if field.default_factory is dataclasses.MISSING else field.default_factory()
    )
    return f"{key}: {value}"


FormatOption = Annotated[
    Format, typer.Option("--format", "-f", help="Output: a rich table, or json/csv/md.")
]
WideOption = Annotated[
    bool,
    typer.Option(
        help="Every column of the method table (split to fit the terminal), not the summary; "
        "json/csv/md always carry every column."
    ),
]

# The run options of `rvctl train`, which compare and sweep pass on to every run.
ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML config (a diff of the defaults).")
]
StepsOption = Annotated[
    int | None, typer.Option(help="Optimizer steps.", show_default=config_default("train.steps"))
]
EngineOption = Annotated[
    str | None,
    typer.Option(
        help="Rollout engine: vllm, hf or auto (vllm where it imports).",
        show_default=config_default("rollout.engine"),
    ),
]
OutputOption = Annotated[
    Path | None,
    typer.Option(help="Output folder for runs.", show_default=config_default("output")),
]
ProcessesOption = Annotated[
    int | None,
    typer.Option(
        help="Trainer processes (train.processes): torchrun starts them on this machine.",
        show_default=config_default("train.processes"),
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
    steps: int | None = None,
    engine: str | None = None,
    output: Path | None = None,
    tracking_uri: str | None = None,
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


# the run options, in the order --help lists them: parameter name -> its alias
RUN_OPTIONS = {
    "config": ConfigOption,
    "steps": StepsOption,
    "engine": EngineOption,
    "processes": ProcessesOption,
    "output": OutputOption,
    "tracking_uri": TrackingOption,
    "settings": SetOption,
}


@dataclass(frozen=True)
class RunOptions:
    """The run options as given (None: not given), for a command that starts runs."""

    config: Path | None = None
    steps: int | None = None
    engine: str | None = None
    processes: int | None = None
    output: Path | None = None
    tracking_uri: str | None = None
    settings: list[str] | None = None

    def overrides(self, **named: Any) -> dict[str, Any]:
        """run_overrides of these, with `named` (dotted fields) among the named options."""
        return run_overrides(
            self.steps,
            self.engine,
            self.output,
            self.tracking_uri,
            self.processes,
            self.settings,
            **named,
        )

    def load(self, **named: Any):
        """The run's config: --config's file (or the defaults) with the overrides."""
        from rollverify.config import load_config

        return load_config(self.config, self.overrides(**named))


def with_run_options(command: Callable) -> Callable:
    """`command`, taking the run options (RUN_OPTIONS) on the command line where its parameter
    `run: RunOptions` stands, and getting them as that one RunOptions: one place for the
    options that train, compare and sweep share."""
    signature = inspect.signature(command, eval_str=True)
    parameters = []
    for parameter in signature.parameters.values():
        if parameter.name != "run":
            parameters.append(parameter)
            continue
        for name, alias in RUN_OPTIONS.items():
            parameters.append(parameter.replace(name=name, default=None, annotation=alias))

    @functools.wraps(command)
    def with_options(*args: Any, **kwargs: Any) -> Any:
        run = RunOptions(**{name: kwargs.pop(name, None) for name in RUN_OPTIONS})
        return command(*args, run=run, **kwargs)

    with_options.__signature__ = signature.replace(parameters=parameters)
    with_options.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_options
