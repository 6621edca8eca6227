"""Option aliases shared by commands, so one flag means one thing everywhere."""

from __future__ import annotations

from typing import Annotated

import typer

from rvctl.output import Format

FormatOption = Annotated[
    Format, typer.Option("--format", "-f", help="Output: a rich table, or json/csv/md.")
]
