"""`rvctl calibrate RUN`: fit this machine's cost terms to what a run timed, and write them as a
profile that `rvctl simulate --profile` (or `cost.profile`) prices with
(rollverify/cost/costmodel/profile.py; docs/cost-model.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rvctl.options import FormatOption
from rvctl.output import Format, print_rows, stderr


def calibrate(
    run: Annotated[Path, typer.Argument(help="A run folder with a trace (it checkpointed).")],
    out: Annotated[
        Path | None, typer.Option(help="Where to write the profile (default: RUN/profile.json).")
    ] = None,
    format: FormatOption = Format.table,
) -> None:
    """Fit the engine's and the trainer's cost terms to a run's trace; write them as a profile."""
    from rollverify.cost.costmodel.profile import fit_profile

    profile = fit_profile(run)
    target = out or run / "profile.json"
    profile.save(target)
    rows = [
        {
            "group": group,
            "term": term.name,
            "value": term.value,
            "error": term.error,
            "relative_error": term.error / term.value if term.error is not None else None,
        }
        for group, terms in (("engine", profile.engine), ("trainer", profile.trainer))
        for term in terms
    ]
    print_rows(rows, format, title=f"cost terms of {profile.machine} (seconds per unit)")
    if format is Format.table:
        fits = ", ".join(
            f"{group} {profile.residual[group]:.1%} over {profile.samples[group]}"
            for group in profile.residual
        )
        stderr.print(f"relative RMS residual: {fits}; error: the term's standard error")
        stderr.print(f"profile written to {target}")
