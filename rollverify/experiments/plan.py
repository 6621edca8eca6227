"""`rvctl plan PILOT...`: before the long run, what each threshold of the grid would do and cost,
from short pilot runs of the user's model and data (docs/cost-model.md, "Planning from a pilot").

Each pilot is a verifying run that logged `verify.threshold_grid` (threshold_grid/<point>: what
each grid point would have kept at each of its checks). Per pilot and grid point:
- the acceptance curve: the point's rate at each step of the pilot (a step without a check
  repeats the one before; steps before the first check take the first), then, to the full
  run's last step, the mean of the pilot's last window (what the switch would see, held);
- `first_window` and `pilot_switch`: the first full window's mean and the step its window
  would have switched at within the pilot (experiments/thresholds.py's replay);
- the full run's modeled GPU-days: `rvctl simulate` (experiments/simulate.py) of RollVerify
  following that curve, with the pilot's own response lengths and prompt length, beside grpo
  and partial rollout on the same lengths.
Figures are means over the pilots (seeds) with 95% intervals; the cost ratio to grpo is paired
per pilot. The recommendation is the cheapest point whose window stayed above the switch in
every pilot and in every simulated run.

What it cannot predict is said with it: accuracy, and anything that first happens after the
pilot's last step (a drift that grows late, responses that lengthen as the policy learns).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from rollverify.config import RunConfig
from rollverify.core.switching import AcceptanceMonitor
from rollverify.experiments.power import mean_ci95
from rollverify.experiments.run_figures import present
from rollverify.experiments.simulate_settings import LengthModel, Settings
from rollverify.experiments.thresholds import checks, own_point, points, replay
from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import RunRecord

BASELINES = ("grpo", "partial")  # priced beside the grid: neither verifies
CANNOT_PREDICT = (
    "accuracy: run the points you consider with seeds (rvctl compare) and compare them "
    "(rvctl report --frontier)",
    "anything that first happens after the pilots' last step: each point's acceptance is "
    "held at its last window from there, so a drift that grows late, or responses that "
    "lengthen as the policy learns, are not seen",
)


# What its validation found (docs/cost-model.md, "Planning from a pilot"): said with every plan
COUNTERFACTUAL = (
    "every point but the pilots' own is counterfactual: its acceptance is what it would have "
    "kept of the caches the pilots' own thresholds left, and a run at a looser point keeps "
    "older tokens, so a looser point's acceptance is over-predicted and a tighter one's "
    "under-predicted (docs/cost-model.md, its validation)"
)


@dataclass(frozen=True)
class Pilot:
    """One pilot run as the plan reads it: its record (with the grid's metrics), its lengths
    and prompt length (its trace), and its horizon (`until`: its last step the plan uses)."""

    record: RunRecord
    lengths: LengthModel
    prompt_tokens: int
    until: int


def horizon(record: RunRecord, first: int | None) -> int:
    """The pilot's last trained step, or `first` if that is earlier."""
    last = max(record.history.get(m.REWARD_MEAN, {}), default=0)
    return min(last, first) if first else last


def last_check(record: RunRecord, until: int) -> int | None:
    """The pilot's last check of its cache up to `until` (a pilot that switched checks no
    more: what the grid says ends there)."""
    checked = [s for s, n in record.history.get(m.CACHE_TOKENS_VERIFIED, {}).items() if n]
    return max((s for s in checked if s <= until), default=None)


def curve(record: RunRecord, point: str, until: int, steps: int) -> tuple[float, ...]:
    """The acceptance `point` would have given at each of `steps` steps (see the module);
    () where the pilot never checked its cache within `until`."""
    rates = {s: r for s, r, _ in checks(record, point) if s <= until}
    if not rates:
        return ()
    window = int(record.params.get("verify.window", 8))
    monitor = AcceptanceMonitor(window)
    out, last = [], rates[min(rates)]
    for step in range(1, min(until, steps) + 1):
        if step in rates:
            last = rates[step]
            monitor.update(last, 1.0)
        out.append(last)
    held = monitor.window_mean
    return tuple(out) + (held,) * (steps - len(out))


def replay_until(record: RunRecord, point: str, until: int) -> dict:
    """experiments/thresholds.py's replay of the pilot's steps up to `until`."""
    short = replace(
        record,
        history={k: {s: v for s, v in h.items() if s <= until} for k, h in record.history.items()},
    )
    return replay(short, point)


def plan(
    pilots: list[Pilot], config: RunConfig, settings: Settings, context: int
) -> dict[str, list]:
    """{"rows": one row per baseline and grid point, "per_pilot": each simulation}: see the
    module. `settings`: the full run's (steps, gpu, profile, ...); lengths, prompt length and
    acceptance come from each pilot."""
    from rollverify.experiments.simulate import simulate_one

    labels = points([p.record for p in pilots])
    per_pilot = []
    for index, pilot in enumerate(pilots):
        own = replace(settings, lengths=pilot.lengths, prompt_tokens=pilot.prompt_tokens)
        days = {}
        for method in BASELINES:
            result = simulate_one(config, own, method, context, seed=0)
            days[method] = result.gpu_days
            per_pilot.append(_pilot_row(index, method, result, days))
        for label in labels:
            accepted = curve(pilot.record, label, pilot.until, settings.steps)
            if not accepted:
                continue
            result = simulate_one(
                config, replace(own, acceptance=accepted), "rollverify", context, seed=0
            )
            row = _pilot_row(index, label, result, days)
            replayed = replay_until(pilot.record, label, pilot.until)
            row |= {f"pilot_{k}": v for k, v in replayed.items()}
            row["held_acceptance"] = accepted[-1]
            per_pilot.append(row)
    owns = {own_point(p.record) for p in pilots}
    rows = [_summary(name, per_pilot, name in owns) for name in (*BASELINES, *labels)]
    rows = [row for row in rows if row["pilots"]]
    return {"rows": rows, "per_pilot": per_pilot}


def _pilot_row(index: int, name: str, result, days: dict[str, float]) -> dict:
    return {
        "pilot": index,
        "point": name,
        "modeled_gpu_days": result.gpu_days,
        "modeled_cost_vs_grpo": result.gpu_days / days["grpo"],
        "modeled_switch_step": result.switch_step,
        "tokens_regenerated": result.tokens_regenerated,
    }


def _summary(name: str, per_pilot: list[dict], own: bool) -> dict:
    mine = [row for row in per_pilot if row["point"] == name]
    row: dict = {"point": name, "own": own, "pilots": len(mine)}
    for figure in ("pilot_first_window", "pilot_lowest_window", "held_acceptance"):
        row[figure], row[f"{figure}_ci95"] = mean_ci95(present(r.get(figure) for r in mine))
    for figure in ("modeled_gpu_days", "modeled_cost_vs_grpo"):
        row[figure], row[f"{figure}_ci95"] = mean_ci95([r[figure] for r in mine])
    pilot_switches = [r.get("pilot_switch_step") for r in mine]
    verifies = name not in BASELINES
    row["pilot_switched"] = sum(s is not None for s in pilot_switches) if verifies else None
    modeled = [r["modeled_switch_step"] for r in mine if r["modeled_switch_step"] is not None]
    row["modeled_switched"] = len(modeled)
    row["modeled_switch_step"] = statistics.median(modeled) if modeled else None
    return row


def recommended(rows: list[dict]) -> dict | None:
    """The cheapest grid point whose window stayed above the switch in every pilot and every
    simulated run (None: no such point)."""
    kept = [
        row
        for row in rows
        if row["point"] not in BASELINES
        and row["pilot_first_window"] is not None
        and row["pilot_switched"] == 0
        and row["modeled_switched"] == 0
    ]
    return min(kept, key=lambda row: row["modeled_gpu_days"], default=None)


def pilot_of(record: RunRecord, first: int | None) -> Pilot:
    """A pilot from its record and its folder's trace (its lengths up to its horizon)."""
    from rollverify.experiments.simulate_settings import lengths_of_run, prompts_of_run

    if not any(k.startswith(m.THRESHOLD_GRID_PREFIX) for k in record.history):
        raise ValueError(
            f"{record.run_id}: logged no threshold grid; a pilot is a verifying run (rollverify, "
            "or any method that verifies) with verify.threshold_grid set (the default)"
        )
    if record.run_dir is None or not Path(record.run_dir).is_dir():
        raise ValueError(
            f"{record.run_id}: its run folder ({record.run_dir}) is not here; the plan reads "
            "the pilot's response lengths from its trace there"
        )
    until = horizon(record, first)
    return Pilot(
        record,
        lengths_of_run(record.run_dir, until=until),
        prompts_of_run(record.run_dir, until=until),
        until,
    )


def stated(rows: list[dict], steps: int, pilots: list[Pilot]) -> list[str]:
    """The plan's conclusions and limits, as lines for the table's foot."""
    best = recommended(rows)
    lines = []
    window = pilots[0].record.params.get("verify.window", "8")
    if all(row["pilot_first_window"] is None for row in rows):
        lines.append(
            f"recommended: none yet. No pilot checked its cache a full window's times "
            f"(verify.window = {window}) before it ended or switched: run the pilots longer"
        )
    elif best is None:
        lines.append(
            "recommended: none. Every grid point's window fell below the switch threshold in a "
            "pilot or a simulated run: RollVerify would switch to on-policy early at any of "
            "them; add looser points (verify.threshold_grid) or train grpo"
        )
    else:
        lines.append(
            f"recommended: {best['point']}, the cheapest point whose window stayed above the "
            f"switch in every pilot and every simulated run ({best['modeled_cost_vs_grpo']:.2f}x "
            "grpo's modeled GPU-days)"
            + ("" if best["own"] else f"; run a pilot at {best['point']} before the long run")
        )
    lines.append(COUNTERFACTUAL)
    lengths = _span([p.until for p in pilots])
    checks = _span([last_check(p.record, p.until) or 0 for p in pilots])
    lines.append(
        f"from {len(pilots)} pilot(s): lengths from their first {lengths}, acceptance from "
        f"their checks up to {checks}; priced over {steps} steps"
    )
    lines += [f"cannot predict: {text}" for text in CANNOT_PREDICT]
    return lines


def _span(steps: list[int]) -> str:
    low, high = min(steps), max(steps)
    return f"step {low}" if low == high else f"steps {low}-{high}"


def acceptance_of_point(run_dir: str | Path, point: str, steps: int) -> tuple[float, ...]:
    """`rvctl simulate --acceptance-from RUN --ds X`: the curve the plan follows for grid point
    X (a ds, or auto:C) of that run, over `steps` steps."""
    from rollverify.core.threshold_grid import parse_point
    from rollverify.tracking.run_records import load_report

    try:
        label, _ = parse_point(point if point.startswith("auto:") else float(point))
    except ValueError as error:
        raise ValueError(f"--ds: {error}") from None
    record = load_report([str(run_dir)], prefixes=(m.THRESHOLD_GRID_PREFIX,)).runs[0]
    logged = points([record])
    accepted = curve(record, label, horizon(record, None), steps) if label in logged else ()
    if not accepted:
        raise ValueError(
            f"--ds {point}: {run_dir} logged no checks at {label}; its grid: "
            f"{', '.join(logged) or 'none (verify.threshold_grid)'}"
        )
    return accepted
