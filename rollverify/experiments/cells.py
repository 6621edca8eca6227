"""The study's table cells as docs/results.md prints them (vs_baseline.py, dose_response.py,
composition.py): a mean with its 95% half-width, and a paired difference with the smallest one
its seeds could detect."""

from __future__ import annotations

from rollverify.experiments.power import FEWEST_PAIRS

FEW_PAIRS = f"n<{FEWEST_PAIRS}"  # a paired figure's cell without its interval says why


def pm(row: dict, figure: str, digits: int = 4, paired: bool | None = None) -> str:
    """'mean ± 95%' of a row's figure, or of a paired difference ('...; detectable'); without
    an interval, why: 'n<3' (a paired figure: `paired`, by default a difference `_vs_`), or
    'n=1' (a mean of one run)."""
    value, ci = row.get(figure), row.get(f"{figure}_ci95")
    if value is None:
        return "-"
    paired = "_vs_" in figure if paired is None else paired
    sign = "+" if "_vs_" in figure else ""
    text = f"{value:{sign}.{digits}f}"
    if ci is None:
        return text + f" ({FEW_PAIRS if paired else 'n=1'})"
    mde = row.get(f"{figure}_mde80")
    return text + f" ± {ci:.{digits}f}" + (f"; {mde:.3f}" if mde is not None else "")


def cell(row: dict, figure: str, spec: str) -> str:
    return "-" if row.get(figure) is None else format(row[figure], spec)
