"""The short table `rvctl compare` and `rvctl report` end with: what decides first.

The full method table has ~28 columns (five stacked tables at 80 columns); this one keeps what
a researcher decides by: accuracy with its interval, the paired difference to grpo with its
interval, and what the run cost against grpo's, in one table that fits 80 columns (the
final accuracy's interval and paired difference are in the wide table).
`--wide` prints every column; json, csv and md always carry every column.
"""

from __future__ import annotations

from typing import Any

FEW_PAIRS = "n<3"  # a difference without an interval (under 3 pairs)
LEGEND = (
    "settings: what a method's rows differ in; "
    "seeds: finished seeds (k/n: k of the row's n runs finished); AUC: area under the "
    "eval curve over the run's steps, normalised, mean over seeds ± its "
    "95% interval (Student t); acc: final eval accuracy, mean over seeds; ΔAUC: the row minus "
    "grpo over the seeds both finished ± its paired 95% interval "
    f"({FEW_PAIRS}: under 3 pairs, no interval); cost*: modeled GPU-days relative to "
    "grpo's (below 1: cheaper, 1 - cost* of grpo's saved; the cost model prices the run's "
    "work on cost.gpu); switch@: "
    "median step of the switch to on-policy. Every column: --wide, or --format json"
)


def summary_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """method_rows' rows cut to what decides, as table cells (strings or None)."""
    any_unfinished = any(row.get("unfinished") for row in rows)
    shown = []
    for row in rows:
        cells = {"method": row["method"]}
        for key in ("corrections", "settings"):
            if key in row:
                cells[key] = row[key]
        runs = row["seeds"] + row["unfinished"]
        cells["seeds"] = f"{row['seeds']}/{runs}" if any_unfinished else str(row["seeds"])
        speedup = row.get("modeled_speedup_vs_grpo")
        cells |= {
            "AUC": plus_minus(row["eval_auc_mean"], row["eval_auc_ci95"]),
            "ΔAUC": difference(row, "auc"),
            "acc": plus_minus(row["eval_accuracy_mean"], None),  # its interval: --wide
            "cost*": f"{1 / speedup:.2f}" if speedup else None,
            "switch@": _step(row.get("switch_step")),
        }
        shown.append(cells)
    return shown


def plus_minus(mean: float | None, ci95: float | None) -> str | None:
    """`0.812±0.013`; the mean alone where there is no interval (one seed)."""
    if mean is None:
        return None
    return f"{mean:.3f}" if ci95 is None else f"{mean:.3f}±{ci95:.3f}"


def difference(row: dict[str, Any], name: str) -> str | None:
    """The paired difference to grpo, `+0.004±0.010`, or `-0.035 (n<3)` without interval."""
    mean, ci95 = row.get(f"{name}_diff_vs_grpo"), row.get(f"{name}_diff_ci95")
    if mean is None:
        return None
    return f"{mean:+.3f} ({FEW_PAIRS})" if ci95 is None else f"{mean:+.3f}±{ci95:.3f}"


def _step(step: float | None) -> str | None:
    if step is None:
        return None
    return str(int(step)) if float(step).is_integer() else f"{step:.1f}"
