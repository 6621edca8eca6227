"""Results to stdout as a rich table, or as json/csv/md for machines; logs go to stderr."""

from __future__ import annotations

import contextlib
import csv
import enum
import io
import json
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

stdout = Console()
stderr = Console(stderr=True)


@contextlib.contextmanager
def stdout_for_results() -> Iterator[None]:
    """While a command works, what anything prints to stdout goes to stderr: Ray's driver
    prints its nodes' messages there (a lost node's raylet dump, before a sweep's table), and
    `-f json` or `-f csv` must leave stdout one document a pipe can read."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


class Format(enum.StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    md = "md"


def print_rows(rows: Sequence[dict[str, Any]], format: Format, title: str | None = None) -> None:
    """Print rows in the chosen format: the columns are every row's keys, in order of first
    appearance (a cell a row lacks is empty)."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    if format is Format.json:
        print(json.dumps(list(rows), indent=2, default=str))
    elif format is Format.csv:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        print(buffer.getvalue(), end="")
    elif format is Format.md:
        print("| " + " | ".join(columns) + " |")
        print("|" + "---|" * len(columns))
        for row in rows:
            print("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
    else:
        table = Table(title=title)
        for column in columns:
            first = next((row[column] for row in rows if row.get(column) is not None), None)
            table.add_column(column, justify="right" if _is_number(first) else "left")
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in columns))
        stdout.print(table)


def print_split(
    rows: Sequence[dict[str, Any]],
    format: Format,
    title: str,
    headers: dict[str, str] | None = None,
    keys: int = 1,
) -> None:
    """print_rows; as a table, with short `headers`, and split into several when wider than
    the terminal, each repeating the first `keys` columns (what a row is about)."""
    if format is not Format.table or not rows:
        print_rows(rows, format, title=title)
        return
    rows = [{(headers or {}).get(k, k): v for k, v in row.items()} for row in rows]
    columns = list(dict.fromkeys(key for row in rows for key in row))
    fixed, rest = columns[:keys], columns[keys:]

    def width(column: str) -> int:  # one space each side, one border
        return 3 + max(len(column), *(len(_cell(row.get(column))) for row in rows))

    parts: list[list[str]] = [[]]
    for column in rest:
        if parts[-1] and 1 + sum(map(width, fixed + parts[-1] + [column])) > stdout.width:
            parts.append([])
        parts[-1].append(column)
    for i, part in enumerate(parts):
        shown = [{c: row.get(c) for c in fixed + part} for row in rows]
        print_rows(shown, format, title=title if i == 0 else f"{title}, continued")


def _is_number(value: Any) -> bool:
    """A number, or a number's cell ('1,024', '0.93x', '65%'): right-aligned."""
    if isinstance(value, str):
        return re.fullmatch(r"[-+]?[\d,]+(\.\d+)?(x|%)?", value) is not None
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
