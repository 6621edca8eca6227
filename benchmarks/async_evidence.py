"""Asynchronous training against synchronous grpo and partial rollout, paired by seed, from two
sweeps' MLflow stores (a sweep over methods and one over methods x eta with rollout.mode async;
`rvctl report` pairs only within one store). Prints one JSON object, and a markdown table to
stderr.

    .venv/bin/python benchmarks/async_evidence.py SYNC_SWEEP_FOLDER ASYNC_SWEEP_FOLDER

The runs of docs/results.md ("Asynchronous training"):
    rvctl sweep method --steps 40 --engine hf --set train.threads=1 --set rollout.slots=256
    rvctl sweep method eta --method grpo,partial-recomputed,rollverify --eta 1,3 --seeds 5 \\
        --steps 40 --engine hf --set train.threads=1 --set rollout.slots=256 \\
        --set rollout.mode=async
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from provenance import provenance

from rollverify.experiments.report import _mean_over_steps, _seed_runs, mean_ci95, paired_diffs
from rollverify.experiments.run_figures import mean_last
from rollverify.tracking.run_records import load_report

METRICS = {  # column -> (metric, how: over steps or last)
    "staleness": ("staleness_mean", "steps"),
    "staleness_max": ("staleness_max", "max"),
    "k3": ("mismatch_kl", "steps"),
    "acceptance": ("acceptance_rate", "steps"),
}


def group_key(run, sweep_params: list[str]) -> str:
    eta = run.params.get("rollout.eta") if "rollout.eta" in sweep_params else None
    return run.method if eta is None else f"{run.method} async eta={eta}"


def summary(runs: list) -> dict[str, Any]:
    accuracy = [a for r in runs if (a := mean_last([r], "eval_accuracy")) is not None]
    mean, ci95 = mean_ci95(accuracy)
    row: dict[str, Any] = {"runs": len(runs), "eval_accuracy": mean, "eval_accuracy_ci95": ci95}
    for column, (metric, how) in METRICS.items():
        if how == "steps":
            row[column] = _mean_over_steps(runs, metric)
        elif how == "last":
            row[column] = mean_last(runs, metric)
        else:
            values = [max(r.history[metric].values()) for r in runs if r.history.get(metric)]
            row[column] = max(values) if values else None  # (not logged before issue 33)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sync_sweep")
    parser.add_argument("async_sweep")
    args = parser.parse_args()
    sync, asynchronous = load_report([args.sync_sweep], None), load_report([args.async_sweep], None)
    groups: dict[str, list] = {}
    for found in (sync, asynchronous):
        for run in found.runs:
            if run.finished:
                groups.setdefault(group_key(run, list(found.sweep_params)), []).append(run)
    grpo = groups["grpo"]
    rows = []
    for name in (
        "grpo",
        "partial-recomputed",
        "rollverify",
        *sorted(g for g in groups if "async" in g),
    ):
        if name not in groups:
            continue
        row = {"method": name, **summary(groups[name])}
        if name != "grpo":
            diffs = paired_diffs(groups[name], grpo)
            row |= {
                "pairs": diffs["pairs"],
                "accuracy_diff_vs_grpo": diffs.get("accuracy_diff_vs_grpo"),
                "accuracy_diff_ci95": diffs.get("accuracy_diff_ci95"),
            }
        base = name.split(" async")[0]
        if "async" in name and base in groups:  # the same method, synchronous
            diffs = paired_diffs(groups[name], groups[base])
            row |= {
                "accuracy_diff_vs_sync": diffs.get("accuracy_diff_vs_grpo"),
                "accuracy_diff_vs_sync_ci95": diffs.get("accuracy_diff_ci95"),
            }
        rows.append(row)
    seeds = sorted(_seed_runs(grpo))
    print(_markdown(rows), file=sys.stderr)
    report = {"benchmark": "async_evidence", "seeds": seeds, "rows": rows}
    report["sources"] = {"sync": args.sync_sweep, "async": args.async_sweep}
    report["provenance"] = provenance()
    print(json.dumps(report, indent=2, default=str))


def _markdown(rows: list[dict[str, Any]]) -> str:
    def pm(mean, ci):
        if mean is None:
            return "-"
        return f"{mean:+.3f} ± {ci:.3f}" if ci is not None else f"{mean:+.3f}"

    lines = [
        "| run | eval accuracy (± 95%) | Δ vs sync grpo (± paired 95%) | Δ vs the same method, "
        "sync | staleness (mean / max) | k3 | acceptance (mean) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        acceptance, worst = r["acceptance"], r["staleness_max"]
        lines.append(
            f"| {r['method']} | {r['eval_accuracy']:.3f} ± {r['eval_accuracy_ci95']:.3f} | "
            f"{pm(r.get('accuracy_diff_vs_grpo'), r.get('accuracy_diff_ci95'))} | "
            f"{pm(r.get('accuracy_diff_vs_sync'), r.get('accuracy_diff_vs_sync_ci95'))} | "
            f"{r['staleness']:.2f} / {'-' if worst is None else int(worst)} | {r['k3']:.4f} | "
            f"{'-' if acceptance is None else f'{acceptance:.2f}'} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
