"""Staleness injected directly: each method's figures against rollout.eta, paired with the same
method at eta 0 seed by seed (docs/results.md, "Staleness injected directly").

    rvctl sweep method eta --config experiments/stale.yaml --method grpo,partial-recomputed,...\
        --eta 0,2,4,8,16 --seeds 5 --engine hf --set train.threads=1 --set rollout.mode=async
    .venv/bin/python benchmarks/stale_dose_response.py runs/sweep-method-eta-* \
        --plots docs/results/stale_dose --out benchmarks/results/stale_dose_response.json

Per (method, eta): the mean over seeds of the AUC (the primary figure), the final accuracy, the
mean entropy over steps, k3 (mismatch_kl) and the acceptance rate (verifying methods), and the
difference to eta 0 with its paired 95% interval and the smallest difference 5 seeds could
detect at 80% power. One PNG per figure against eta, a line per method. The per-seed figures
are in the JSON beside the table (`--per-seed` of rvctl report holds the same runs' own).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from rollverify.experiments.power import mean_ci95, paired_difference
from rollverify.experiments.report import counted, eval_area
from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import RunRecord, load_report

FIGURES = {  # name -> each run's value
    "auc": eval_area,
    "accuracy": lambda r: r.last(m.EVAL_ACCURACY),
    "entropy": lambda r: _over_steps(r, m.ENTROPY_MEAN),
    "k3": lambda r: _over_steps(r, m.MISMATCH_KL),
    "acceptance": lambda r: _over_steps(r, m.ACCEPTANCE_RATE),
    "staleness_token_mean": lambda r: _over_steps(r, m.STALENESS_TOKEN_MEAN),
}
PAIRED = ("auc", "accuracy", "entropy", "k3")


def _over_steps(run: RunRecord, metric: str) -> float | None:
    values = list(run.history.get(metric, {}).values())
    return statistics.fmean(values) if values else None


def rows(runs: list[RunRecord]) -> list[dict]:
    points: dict[tuple[str, int], list[RunRecord]] = {}
    for run in runs:
        points.setdefault((run.method, int(run.params["rollout.eta"])), []).append(run)
    out = []
    for (method, eta), group in sorted(points.items()):
        done = counted(group)
        row: dict = {"method": method, "eta": eta, "seeds": len(done)}
        for name, value in FIGURES.items():
            values = [v for v in (value(r) for r in done) if v is not None]
            row[name], row[f"{name}_ci95"] = mean_ci95(values)
        base = {r.seed: r for r in counted(points.get((method, 0), []))}
        for name in PAIRED:
            diffs = [
                FIGURES[name](r) - FIGURES[name](base[r.seed])
                for r in done
                if r.seed in base and FIGURES[name](r) is not None
            ]
            paired = paired_difference(diffs) if eta else (None, None, None)
            columns = (f"{name}_vs_eta0", f"{name}_vs_eta0_ci95", f"{name}_vs_eta0_mde80")
            row |= dict(zip(columns, paired, strict=True))
        row["per_seed"] = {
            str(r.seed): {name: value(r) for name, value in FIGURES.items()} for r in done
        }
        out.append(row)
    return out


def plot(table: list[dict], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in FIGURES:
        figure, axes = plt.subplots(figsize=(6, 4))
        for method in dict.fromkeys(r["method"] for r in table):
            mine = [r for r in table if r["method"] == method and r[name] is not None]
            if not mine:
                continue
            axes.errorbar(
                [r["eta"] for r in mine],
                [r[name] for r in mine],
                yerr=[r[f"{name}_ci95"] or 0.0 for r in mine],
                marker="o",
                capsize=3,
                label=method,
            )
        axes.set_xscale("symlog", linthresh=1)
        axes.set_xlabel("rollout.eta (versions)")
        axes.set_ylabel(name)
        axes.set_title(f"{name} against staleness (mean over seeds, 95% interval)")
        axes.legend(fontsize=8)
        path = folder / f"{name}_vs_eta.png"
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", help="sweep folders (or run ids)")
    parser.add_argument("--tracking-uri")
    parser.add_argument("--plots", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    found = load_report(args.targets, args.tracking_uri)
    table = rows(found.runs)
    for row in table:
        cells = [f"{row['method']:>20} eta={row['eta']:<2} n={row['seeds']}"]
        for name in PAIRED:
            value, diff = row[name], row[f"{name}_vs_eta0"]
            ci = row[f"{name}_vs_eta0_ci95"]
            cells.append(
                f"{name} {value:.4f}" + (f" ({diff:+.4f} ± {ci:.4f})" if ci is not None else "")
                if value is not None
                else f"{name} -"
            )
        print("  ".join(cells))
    if args.plots:
        for path in plot(table, args.plots):
            print(f"wrote {path}")
    if args.out:
        args.out.write_text(json.dumps({"rows": table}, indent=1) + "\n")


if __name__ == "__main__":
    main()
