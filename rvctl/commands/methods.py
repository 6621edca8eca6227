"""`rvctl methods`: the methods of the paper that `--method` accepts."""

from __future__ import annotations

from rich import box
from rich.table import Table

from rvctl import output
from rvctl.options import FormatOption
from rvctl.output import Format, print_rows

# The table fits 80 columns: the switches as one mark each, the summary wrapped.
LEGEND = (
    "on: P partial rollout, V verification, T its token stage, S switching. denominator: "
    "pi_old, mu (behavior) or recomputed. Every field: --format json, csv or md."
)


def methods(format: FormatOption = Format.table) -> None:
    """List the methods and what each one switches on."""
    from rollverify.core.methods import METHODS

    rows = [
        {
            "method": m.name,
            "partial": m.partial,
            "verify": m.verify,
            "token_stage": m.verify and m.token_stage,
            "switching": m.switching,
            "filter": m.sample_filter,
            "denominator": m.denominator,
            "correction": m.correction,
            "summary": m.summary,
        }
        for m in METHODS.values()
    ]
    if format is not Format.table:
        print_rows(rows, format, title="methods")
        return
    table = Table(title="methods", box=box.SIMPLE_HEAD, pad_edge=False, caption=LEGEND)
    table.caption_justify = "left"
    table.add_column("method", no_wrap=True)
    table.add_column("on", no_wrap=True)
    table.add_column("denominator", no_wrap=True)
    table.add_column("summary")  # wraps: the rest of the width
    for row in rows:
        switches = ("partial", "verify", "token_stage", "switching")
        on = "".join(mark if row[s] else "-" for mark, s in zip("PVTS", switches, strict=True))
        table.add_row(row["method"], on, row["denominator"], row["summary"])
    output.stdout.print(table)
