"""`rvctl plan PILOT...`: which ds to train with, and what the long run will cost, from short
pilot runs (rollverify/experiments/plan.py; docs/cost-model.md, "Planning from a pilot")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rvctl.options import ConfigOption, FormatOption, SetOption
from rvctl.output import Format, print_split, stderr, stdout

HEADERS = {
    "pilot_first_window": "first window",
    "pilot_switched": "pilot switch",
    "held_acceptance": "held",
    "modeled_switch_step": "switch@",
    "modeled_gpu_days": "GPU-days",
    "modeled_cost_vs_grpo": "vs grpo",
}
MEANING = (
    "first window: the pilots' first full acceptance window at that point; pilot switch: the "
    "pilots whose window fell below the switch threshold; held: the acceptance held after "
    "the pilots' last check (their last window); switch@: the full run's modeled "
    "switch step (median over the pilots; -: none); GPU-days and vs grpo: the full run, "
    "modeled (docs/cost-model.md), ± 95% over the pilots"
)


def plan(
    pilots: Annotated[
        list[str],
        typer.Argument(
            help="Pilot runs: run folders, output folders or run ids of short verifying runs "
            "(20-40 steps of your model and data) that logged verify.threshold_grid.",
            show_default=False,
        ),
    ],
    config: ConfigOption = None,
    steps: Annotated[
        int | None, typer.Option(help="The full run's steps (default: the config's train.steps).")
    ] = None,
    context: Annotated[
        int | None,
        typer.Option(help="Response budget (default: the config's rollout.max_new_tokens)."),
    ] = None,
    gpu: Annotated[
        str | None, typer.Option(help="a100, h100, h200, b200 (default: cost.gpu).")
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option(help="A profile (rvctl calibrate) of your hardware (default: cost.profile)."),
    ] = None,
    first: Annotated[
        int | None,
        typer.Option(help="Use only the pilots' first N steps (a longer run as a pilot)."),
    ] = None,
    tracking_uri: Annotated[
        str | None, typer.Option(help="MLflow URI of the pilots (default: their folders').")
    ] = None,
    settings_: SetOption = None,
    format: FormatOption = Format.table,
    out: Annotated[
        Path | None,
        typer.Option(help="Also write the plan (rows, each pilot's, the statements) as JSON."),
    ] = None,
) -> None:
    """Per ds of the grid: the pilots' acceptance, whether it would switch, and the full run's
    modeled GPU-days beside grpo and partial; the cheapest ds that keeps the window up."""
    from rollverify.config import load_config, parse_settings
    from rollverify.cost.costmodel.profile import Profile
    from rollverify.experiments.plan import pilot_of, stated
    from rollverify.experiments.plan import plan as make_plan
    from rollverify.experiments.simulate_settings import Settings
    from rollverify.tracking.metric_names import THRESHOLD_GRID_PREFIX
    from rollverify.tracking.run_records import load_report

    if first is not None and first < 1:
        raise ValueError(f"--first: must be >= 1, got {first}")
    found = load_report(pilots, tracking_uri, prefixes=(THRESHOLD_GRID_PREFIX,))
    chosen = [pilot_of(record, first) for record in found.runs]
    scale = config or Path(found.runs[0].run_dir) / "config.yaml"
    run_config = load_config(scale, parse_settings(settings_))
    profile_path = profile or run_config.cost.profile
    settings = Settings(
        gpu=gpu or run_config.cost.gpu,
        steps=steps if steps is not None else run_config.train.steps,
        profile=Profile.load(profile_path, "--profile") if profile_path else None,
    )
    context = context if context is not None else run_config.rollout.max_new_tokens
    settings.check()
    stderr.print(
        f"plan: {len(chosen)} pilot(s) in {found.tracking_uri}; pricing {scale} "
        f"({settings.steps} steps, {settings.gpu}, context {context})",
        markup=False,
        highlight=False,
    )
    planned = make_plan(chosen, run_config, settings, context)
    lines = stated(planned["rows"], settings.steps, chosen)
    if out is not None:
        out.write_text(json.dumps(planned | {"statements": lines}, indent=1) + "\n")
    if format is Format.json:
        stdout.print_json(json.dumps({"rows": planned["rows"], "statements": lines}))
        return
    if format is not Format.table:
        print_split(planned["rows"], format, "plan", HEADERS, 1)
        return
    print_split(shown(planned["rows"]), format, "plan", HEADERS, 1)
    for line in lines:
        stdout.print(line, soft_wrap=True, markup=False, highlight=False)
    stderr.print(MEANING, markup=False, highlight=False)


def shown(rows: list[dict]) -> list[dict[str, str]]:
    """The table's cells; a dt variant (_dt_scaled, _dt_run) only where its figures differ
    from its point's with the other dt (json/csv/md: every row)."""
    cells = {row["point"]: _cells(row) for row in rows}

    def figures(point: str) -> list[str]:
        return [v for k, v in cells[point].items() if k != "point"]

    return [
        c
        for point, c in cells.items()
        if "_dt_" not in point or figures(point) != figures(point.split("_dt_")[0])
    ]


def _cells(row: dict) -> dict[str, str]:
    from rollverify.experiments.cells import cell, pm

    switched = row["pilot_switched"]
    return {
        "point": row["point"] + (" (the pilots')" if row["own"] else ""),
        "pilot_first_window": pm(row, "pilot_first_window", 3),
        "pilot_switched": "-" if switched is None else f"{switched}/{row['pilots']}",
        "held_acceptance": cell(row, "held_acceptance", ".3f"),
        "modeled_switch_step": cell(row, "modeled_switch_step", "g"),
        "modeled_gpu_days": _days(row),
        "modeled_cost_vs_grpo": _ratio(row),
    }


def _ratio(row: dict) -> str:
    ratio, ci = row["modeled_cost_vs_grpo"], row["modeled_cost_vs_grpo_ci95"]
    return f"{ratio:.2f}x" + (f" ± {ci:.2f}" if ci is not None else "")


def _days(row: dict) -> str:
    days, ci = row["modeled_gpu_days"], row["modeled_gpu_days_ci95"]
    return f"{days:.3g}" + (f" ± {ci:.2g}" if ci is not None else " (n=1)")
