"""Issue 74's validation of `rvctl plan` (docs/cost-model.md, "Its validation: the rule and the
held-out set", written before these runs): 30-step RollVerify pilots on experiments/stale.yaml
at the frontier study's three step sizes, and the plan's predictions for the committed per-seed
rows it never reads.

    .venv/bin/python benchmarks/plan_validation.py [--pilots runs/plan-pilots] \
        [--out benchmarks/results/plan_validation.json]

~2 minutes a pilot on 2 cores (9 pilots, one at a time; a finished pilot is not run again).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
RV = str(ROOT / ".venv" / "bin" / "rvctl")
SEEDS = (0, 1, 2)
PILOT_STEPS, FULL_STEPS = 30, 200
GRID = "[0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.08, 'auto:1', 'auto:2', 'auto:4']"
STEP_SIZES = {"5e-4": 0.0005, "1.25e-4": 0.000125, "3.125e-5": 0.00003125}
FIRST_WINDOW, SWITCH, COST = 0.05, 30, 0.10  # the rule's tolerances

Rows = list[tuple[str, str]]  # (file under docs/results, its group label)
TABLE3, FRONTIER = "stale/table3_seeds.csv", "frontier/"
STEP_ROWS = FRONTIER + "step_size_seeds.csv"
MORE_ROWS = FRONTIER + "step_size_more_seeds.csv"
LR4, LR16 = "learning_rate=0.000125", "learning_rate=3.125e-05"
GRPO: dict[str, Rows] = {
    "5e-4": [(TABLE3, "method=grpo")],
    "1.25e-4": [(STEP_ROWS, f"method=grpo, {LR4}"), (MORE_ROWS, f"method=grpo, {LR4}")],
    "3.125e-5": [(STEP_ROWS, f"method=grpo, {LR16}")],
}
# (step size, grid label, rows of its first window, rows of its switch and cost)
HELD_OUT: list[tuple[str, str, Rows, Rows]] = [
    ("5e-4", "ds_0.01", [(FRONTIER + "switch_low_seeds.csv", "switch_threshold=0.3")],
     [(TABLE3, "method=rollverify")]),
    ("5e-4", "ds_0.02", [(FRONTIER + "ds_loose_seeds.csv", "ds=0.02, dt=2.0")], []),
    ("5e-4", "ds_0.03", [(FRONTIER + "ds_loose_seeds.csv", "ds=0.03, dt=2.0")], []),
    ("5e-4", "auto_c2", [(FRONTIER + "auto_seeds.csv", "learning_rate=0.0005")], []),
    ("1.25e-4", "ds_0.01", [(STEP_ROWS, f"method=rollverify, {LR4}"),
                            (MORE_ROWS, f"method=rollverify, {LR4}")], []),
    ("1.25e-4", "auto_c2", [(FRONTIER + "auto4_seeds.csv", LR4)], []),
    ("3.125e-5", "ds_0.01", [(STEP_ROWS, f"method=rollverify, {LR16}")], []),
    ("3.125e-5", "auto_c2", [(FRONTIER + "auto16_seeds.csv", LR16)], []),
]  # fmt: skip


def rows(selected: Rows) -> list[dict]:
    out = []
    for name, group in selected:
        with open(RESULTS / name, newline="") as f:
            out += [row for row in csv.DictReader(f) if row["group"] == group]
    assert out, f"no committed rows for {selected}"
    return out


def number(row: dict, key: str) -> float | None:
    return float(row[key]) if row.get(key) not in (None, "") else None


def committed(first: Rows, rest: Rows, step: str) -> dict:
    """The rows' figures: mean first window, share switched by step 30, cost over grpo's."""
    switch_rows = rows(rest or first)
    windows = [number(r, "acceptance_first_window") for r in rows(first)]
    switches = [number(r, "switch_step") for r in switch_rows]
    days = statistics.fmean(number(r, "modeled_gpu_days") for r in switch_rows)
    grpo = statistics.fmean(number(r, "modeled_gpu_days") for r in rows(GRPO[step]))
    return {
        "first_window": statistics.fmean(w for w in windows if w is not None),
        "first_window_by_seed": {
            int(r["seed"]): number(r, "acceptance_first_window") for r in rows(first)
        },  # fmt: skip
        "switched_by_30": sum(s is not None and s <= SWITCH for s in switches) / len(switches),
        "rows": len(switch_rows),
        "cost_vs_grpo": days / grpo,
    }


def run_pilots(folder: Path, step: str) -> None:
    for seed in SEEDS:
        done = [p for p in folder.glob(f"rollverify-s{seed}-*") if (p / "summary.json").is_file()]
        if done:
            continue
        command = [RV, "train", "-c", str(ROOT / "experiments" / "stale.yaml"), "--method",
                   "rollverify", "--seed", str(seed), "--steps", str(PILOT_STEPS), "--engine",
                   "hf", "--checkpoint-every", str(PILOT_STEPS), "--output", str(folder),
                   "--set", "train.threads=1", "--set",
                   f"train.learning_rate={STEP_SIZES[step]}", "--set",
                   f"verify.threshold_grid={GRID}"]  # fmt: skip
        print(f"pilot {step} seed {seed}", file=sys.stderr, flush=True)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def planned(folder: Path) -> dict:
    out = folder / "plan.json"
    subprocess.run([RV, "plan", str(folder), "--steps", str(FULL_STEPS), "--first",
                    str(PILOT_STEPS), "--out", str(out), "-f", "json"],
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    return json.loads(out.read_text())


def pilots_repeat(plan: dict, actual: dict) -> dict:
    """Each pilot's own first window (ds_0.01 at dt 2: the run's own thresholds) beside the
    committed run of its seed: do 30-step pilots repeat the committed runs' first steps?"""
    own = [r for r in plan["per_pilot"] if r["point"] == "ds_0.01"]
    return {
        r["pilot"]: (r.get("pilot_first_window"), actual["first_window_by_seed"].get(seed))
        for r, seed in zip(own, SEEDS, strict=True)
    }


def seed_matched(plan: dict, label: str, first: Rows, rest: Rows, step: str) -> list[dict]:
    """Not the rule's figure, its explanation: each pilot against the committed run of its own
    seed (the rows' mean mixes in seeds no pilot saw)."""
    windows = {int(r["seed"]): number(r, "acceptance_first_window") for r in rows(first)}
    switched = {int(r["seed"]): number(r, "switch_step") for r in rows(rest or first)}
    days = {int(r["seed"]): number(r, "modeled_gpu_days") for r in rows(rest or first)}
    grpo = {int(r["seed"]): number(r, "modeled_gpu_days") for r in rows(GRPO[step])}
    out = []
    for row in (r for r in plan["per_pilot"] if r["point"] == label):
        seed, first_window = SEEDS[row["pilot"]], row.get("pilot_first_window")
        pilot_switch = row.get("pilot_switch_step")
        out.append({
            "seed": seed,
            "first_window_error": None if first_window is None else first_window - windows[seed],
            "switch_agrees": (pilot_switch is not None and pilot_switch <= SWITCH)
            == (switched[seed] is not None and switched[seed] <= SWITCH),
            "cost_relative_error": row["modeled_cost_vs_grpo"] / (days[seed] / grpo[seed]) - 1,
        })  # fmt: skip
    return out


def judged(plan_row: dict, actual: dict) -> dict:
    predicted = {
        "first_window": plan_row["pilot_first_window"],
        "switches_by_30": plan_row["pilot_switched"] >= 2,
        "cost_vs_grpo": plan_row["modeled_cost_vs_grpo"],
    }
    window_error = (
        None if predicted["first_window"] is None
        else predicted["first_window"] - actual["first_window"]
    )  # fmt: skip
    cost_error = predicted["cost_vs_grpo"] / actual["cost_vs_grpo"] - 1
    met = {
        "first_window": window_error is not None and abs(window_error) <= FIRST_WINDOW,
        "switch": predicted["switches_by_30"] == (actual["switched_by_30"] > 0.5),
        "cost": abs(cost_error) <= COST,
    }
    return {"predicted": predicted, "committed": actual, "first_window_error": window_error,
            "cost_relative_error": cost_error, "met": met}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pilots", type=Path, default=ROOT / "runs" / "plan-pilots")
    default = ROOT / "benchmarks" / "results" / "plan_validation.json"
    parser.add_argument("--out", type=Path, default=default)
    args = parser.parse_args()
    plans = {}
    for step in STEP_SIZES:
        folder = args.pilots / step
        run_pilots(folder, step)
        plans[step] = planned(folder)
    points, repeats = [], {}
    for step, label, first, rest in HELD_OUT:
        actual = committed(first, rest, step)
        row = next(r for r in plans[step]["rows"] if r["point"] == label)
        points.append({"step_size": step, "point": label} | judged(row, actual))
        points[-1]["by_seed"] = seed_matched(plans[step], label, first, rest, step)
        if label == "ds_0.01":
            repeats[step] = pilots_repeat(plans[step], actual)
    result = {"pilot_steps": PILOT_STEPS, "full_steps": FULL_STEPS, "seeds": SEEDS,
              "points": points, "pilots_repeat_committed_first_window": repeats,
              "statements": {s: p["statements"] for s, p in plans.items()}}  # fmt: skip
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        "| step size | point | first window: predicted / committed | switch by 30 | "
        "cost vs grpo: predicted / committed | met |"
    )
    print("|---|---|---|---|---|---|")
    for p in points:
        pr, co, met = p["predicted"], p["committed"], p["met"]
        window = "-" if pr["first_window"] is None else f"{pr['first_window']:.3f}"
        print(
            f"| {p['step_size']} | {p['point']} | {window} / {co['first_window']:.3f} | "
            f"{'yes' if pr['switches_by_30'] else 'no'} / {co['switched_by_30']:.0%} | "
            f"{pr['cost_vs_grpo']:.2f} / {co['cost_vs_grpo']:.2f} | "
            f"{', '.join(k for k, v in met.items() if v) or 'none'} |"
        )


if __name__ == "__main__":
    main()
