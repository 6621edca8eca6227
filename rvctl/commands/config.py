"""`rvctl config show`: the config a run would use (defaults <- file <- --set <- options),
resolved and checked, without running anything."""

from __future__ import annotations

import enum
import json
from typing import Annotated

import typer
import yaml

from rollverify.infra.nested_dicts import config_fields
from rvctl.options import ConfigOption, SetOption
from rvctl.output import Format, print_rows

app = typer.Typer(help="The resolved config: what a run would use.", no_args_is_help=True)


class ShowFormat(enum.StrEnum):
    yaml = "yaml"
    json = "json"
    table = "table"


@app.command("show")
def show(
    config: ConfigOption = None,
    settings: SetOption = None,
    format: Annotated[
        ShowFormat,
        typer.Option(
            "--format",
            "-f",
            help="yaml (a config file to start from), json, or a table "
            "marking the fields that differ from the defaults.",
        ),
    ] = ShowFormat.yaml,
) -> None:
    """Print the resolved config: every field, paths found, checked as a run checks it."""
    from rollverify.config import RunConfig, load_config, parse_settings

    resolved = load_config(config, parse_settings(settings)).to_dict()
    if format is ShowFormat.yaml:
        print(yaml.safe_dump(resolved, sort_keys=False), end="")
    elif format is ShowFormat.json:
        print(json.dumps(resolved, indent=2))
    else:
        defaults = config_fields(RunConfig().to_dict())
        rows = [
            {"field": name, "value": value, "default": "" if value == defaults[name] else "changed"}
            for name, value in config_fields(resolved).items()
        ]
        print_rows(rows, Format.table, title="resolved config")
