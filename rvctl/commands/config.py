"""`rvctl config show`: the config a run would use (defaults <- file <- --set <- options),
resolved and checked, without running anything."""

from __future__ import annotations

import enum
import json
import textwrap
from typing import Annotated

import typer
import yaml

from rollverify.infra.nested_dicts import config_fields
from rvctl.options import ConfigOption, FormatOption, SetOption
from rvctl.output import Format, print_rows

app = typer.Typer(help="The resolved config: what a run would use.", no_args_is_help=True)


class ShowFormat(enum.StrEnum):
    yaml = "yaml"
    json = "json"
    table = "table"


@app.command("show", short_help="The resolved config, checked as a run checks it.")
def show(
    config: ConfigOption = None,
    method: Annotated[
        str | None,
        typer.Option(help="The method, as rvctl train --method sets it (train.method)."),
    ] = None,
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

    named = {"train.method": method} if method is not None else {}
    resolved = load_config(config, parse_settings(settings) | named).to_dict()
    if format is ShowFormat.yaml:
        print(yaml.safe_dump(resolved, sort_keys=False), end="")
    elif format is ShowFormat.json:
        print(json.dumps(resolved, indent=2))
    else:
        from rollverify.config.explain import field_docs

        defaults, docs = config_fields(RunConfig().to_dict()), field_docs()
        rows = [
            {
                "field": name,
                "value": value,
                "default": "" if value == defaults[name] else "changed",
                "doc": docs[name].doc,
            }
            for name, value in config_fields(resolved).items()
        ]
        print_rows(rows, Format.table, title="resolved config")


@app.command("explain", short_help="Each field's doc, type, default and allowed values.")
def explain(
    field: Annotated[
        str | None,
        typer.Argument(help="A field (verify.ds) or a section (verify); default: every field."),
    ] = None,
    format: FormatOption = Format.table,
) -> None:
    """What each config field means: its doc, type, default and allowed values."""
    from rollverify.config.explain import explain as explained
    from rollverify.config.explain import field_docs

    docs = explained(field) if field else list(field_docs().values())
    if format is Format.table:  # a block per field: it reads whole at 80 columns
        for doc in docs:
            allowed = f"; {doc.allowed}" if doc.allowed else ""
            print(f"{doc.name}: {doc.type}, default {_plain(doc.default)}{allowed}")
            print(textwrap.fill(doc.doc, width=78, initial_indent="  ", subsequent_indent="  "))
        return
    rows = [
        {
            "field": d.name,
            "type": d.type,
            "default": _plain(d.default),
            "allowed": d.allowed,
            "doc": d.doc,
        }
        for d in docs
    ]
    print_rows(rows, format, title=f"config fields{f' of {field}' if field else ''}")


def _plain(value) -> str:
    """A default as it is written in YAML: null, true, {}."""
    return yaml.safe_dump(value, default_flow_style=True).removesuffix("\n...\n").strip()
