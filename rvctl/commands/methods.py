"""`rvctl methods`: the methods of the paper that `--method` accepts."""

from __future__ import annotations

from rvctl.options import FormatOption
from rvctl.output import Format, print_rows


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
    print_rows(rows, format, title="methods")
