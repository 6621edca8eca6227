"""The study's table cells as docs/results.md prints them (vs_baseline.py, dose_response.py,
composition.py): a mean with its 95% half-width, and a paired difference with the smallest one
its seeds could detect."""

from __future__ import annotations


def pm(row: dict, figure: str, digits: int = 4) -> str:
    """'mean ± 95%' of a row's figure, or of a paired difference ('...; detectable')."""
    value, ci = row.get(figure), row.get(f"{figure}_ci95")
    if value is None:
        return "-"
    sign = "+" if "_vs_" in figure else ""
    text = f"{value:{sign}.{digits}f}" + (f" ± {ci:.{digits}f}" if ci is not None else "")
    mde = row.get(f"{figure}_mde80")
    return text + (f"; {mde:.3f}" if mde is not None else "")


def cell(row: dict, figure: str, spec: str) -> str:
    return "-" if row.get(figure) is None else format(row[figure], spec)
