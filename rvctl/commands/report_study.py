"""`rvctl report --vs/--by` and `--table`: the staleness study's tables (docs/results.md) over
any runs, from the library (rollverify/experiments/vs_baseline.py, dose_response.py,
composition.py, step_size.py)."""

from __future__ import annotations

import enum
import json
import re
from pathlib import Path
from typing import Any

from rvctl.output import Format, print_rows, print_split, stderr


class StudyTable(enum.StrEnum):
    dose_response = "dose-response"
    composition = "composition"
    step_size = "step-size"


def check_study_options(
    vs: str | None,
    by: str | None,
    table: StudyTable | None,
    frontier: bool = False,
    thresholds: bool = False,
    margin: float | None = None,
    only: str | None = None,
) -> None:
    """Bad combinations, before the store is read."""
    if only is not None and not frontier:
        raise ValueError("--only: picks points of --frontier; give --frontier too")
    if only is not None:
        try:
            re.compile(only)
        except re.error as error:
            raise ValueError(f"--only: {only!r} is not a regular expression ({error})") from None
    if margin is not None and not (vs or frontier):
        raise ValueError("--margin: marks the points of --frontier or --vs; give one of them")
    if margin is not None and not margin > 0:
        raise ValueError(f"--margin: {margin:g}; a margin is > 0 (0.01: one point of AUC)")
    chosen = [name for name, on in [("--vs", vs), ("--frontier", frontier), ("--table", table),
              ("--thresholds", thresholds)] if on]  # fmt: skip
    if thresholds and len(chosen) > 1:
        raise ValueError(f"{' and '.join(chosen)}: one table at a time; drop all but one")
    if by and not (vs or frontier):
        raise ValueError("--by: keeps values in the baseline of --vs; give --vs KEY=VALUE too")
    if (vs or frontier) and table:
        given = "--frontier" if frontier else "--vs"
        raise ValueError(f"{given} and --table {table}: one table at a time; drop one of them")
    if vs:
        from rollverify.experiments.vs_baseline import parse_vs

        parse_vs(vs)


def show_study(
    runs: list,
    vs: str | None,
    by: str | None,
    table: StudyTable | None,
    format: Format,
    out: Path | None,
    plots_dir: Path | None,
    frontier: bool = False,
    thresholds: bool = False,
    margin: float | None = None,
    only: str | None = None,
) -> list[Path]:
    """Print the table; write its rows (`out`, JSON) and, for the dose-response and the
    frontier, their charts. Returns the files written."""
    from rollverify.experiments import composition, dose_response, step_size, vs_baseline
    from rollverify.experiments import frontier as cost_accuracy
    from rollverify.experiments import thresholds as grid
    from rollverify.infra.atomic_write import atomic_write_text

    if frontier or vs:
        vs = vs or "grpo"
        say_unpaired(runs, vs_baseline.parse_vs(vs), vs_baseline.parse_by(by or ""), vs)
    if thresholds:
        rows = grid.rows(runs)
        if not rows:
            raise ValueError(
                "--thresholds: these runs logged no threshold_grid/ metric (a verifying run "
                "logs one per verify.threshold_grid point, from issue 74's release on)"
            )
        say_pooled(rows)
        record: dict[str, Any] = {"rows": rows}
        cells, title = grid.markdown(rows), "what each threshold would have done"
    elif frontier:
        baseline, keys = vs_baseline.parse_vs(vs), vs_baseline.parse_by(by or "")
        rows = cost_accuracy.frontier_rows(runs, baseline, keys, margin)
        rows = [row for row in rows if only is None or re.search(only, row["point"])]
        record = {"vs": vs, "points": rows}
        cells, title = cost_accuracy.markdown(rows), f"cost-accuracy frontier against {vs}"
    elif vs:
        rows = vs_baseline.rows(
            runs, vs_baseline.parse_vs(vs), vs_baseline.parse_by(by or ""), margin
        )
        record = {"vs": vs, "rows": rows}
        cells, title = vs_baseline.markdown(rows), f"against {vs}" + (f" by {by}" if by else "")
    else:
        modules = {
            StudyTable.dose_response: dose_response,
            StudyTable.composition: composition,
            StudyTable.step_size: step_size,
        }
        module = modules[table]
        rows = module.rows(runs)
        record, cells, title = {"rows": rows}, module.markdown(rows), str(table)
    if format is Format.md:
        print_rows(cells, Format.md)
    elif format is Format.table:
        print_split(cells, Format.table, title, keys=1)
    else:  # json: every figure; csv: one line per row, its per-seed figures left to --out
        print_rows(rows if format is Format.json else [_flat(row) for row in rows], format)
    written = []
    if out is not None:
        atomic_write_text(out, json.dumps(record, indent=1) + "\n")
        written.append(out)
    if plots_dir is not None and table is StudyTable.dose_response:
        written += dose_response.plot(rows, plots_dir)
    if plots_dir is not None and frontier:
        written.append(cost_accuracy.plot(rows, plots_dir, margin=margin))
    if plots_dir is not None and thresholds:
        written.append(grid.plot(runs, plots_dir))
    return written


def say_pooled(rows: list[dict]) -> None:
    """--thresholds pools its runs in each row: where they ran at more than one setting of
    their own (the paper's and auto: more than one row marked the run's), say so, and how to
    see one setting alone."""
    owns = sorted(row["point"] for row in rows if row["own"])
    if len(owns) > 1:
        stderr.print(
            f"note: these runs ran at {len(owns)} threshold settings of their own "
            f"({', '.join(owns)}); each row pools them all. For one setting's answer, give "
            "its runs alone",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )


def say_unpaired(runs: list, baseline: dict[str, str], by: tuple[str, ...], vs: str) -> None:
    """The runs whose baseline twin (its seed, the baseline's values) is missing, and the
    command that makes it: a note under the table, or, where nothing pairs, one line each and
    exit 2 (a table of dashes would claim to compare)."""
    from rollverify.experiments import vs_baseline

    groups = vs_baseline.paired_groups(runs, baseline, by)
    if not groups:
        raise ValueError(f"--vs {vs}: every run here is the baseline's; add the runs to compare")
    missing = vs_baseline.missing_twins(runs, baseline, by)
    lines = [
        f"{label}: {_seeds(seeds)} no {vs} run to pair with; make them: {command}"
        for label, seeds, _, command in missing
    ]
    if len(missing) == len(groups) and not any(paired for _, _, paired, _ in missing):
        raise ValueError("\n".join(lines))
    for line in lines:
        stderr.print(f"note: {line}", soft_wrap=True, markup=False, highlight=False)


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """A row as CSV columns: the group's values after its method, no per-seed figures."""
    first = {"method": row["method"]} if "method" in row else {}
    rest = {k: v for k, v in row.items() if k not in ("method", "values", "per_seed")}
    return first | row.get("values", {}) | rest


def _seeds(seeds: list[int]) -> str:
    listed = ", ".join(map(str, seeds))
    return f"seed {listed} has" if len(seeds) == 1 else f"seeds {listed} have"
