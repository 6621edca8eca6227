"""Staleness injected directly: each method's figures against rollout.eta, paired with the same
method at eta 0 seed by seed (docs/results.md, "Staleness injected directly"): what
`rvctl report --table dose-response` prints, over sweeps such as

    rvctl sweep method eta --config experiments/stale.yaml --method grpo,partial-recomputed,...\
        --eta 0,2,4,8,16 --seeds 5 --engine hf --set train.threads=1 --set rollout.mode=async

Per (method, eta) of the asynchronous runs: the mean over seeds of the AUC (the primary figure),
the final accuracy, the mean entropy over steps, k3 (mismatch_kl), per-token staleness, the
acceptance rate, the tokens each verification stage cut and the switch step (verifying
methods), and the difference to the same method at eta 0 with its paired 95% interval and the
smallest difference 5 seeds could detect at 80% power; where synchronous grpo's runs are among
the targets, the AUC's paired difference to them too. One PNG per figure against eta, a line
per method. The per-seed figures are in each row (`per_seed`).
"""

from __future__ import annotations

from pathlib import Path

from rollverify.experiments.cells import cell, pm
from rollverify.experiments.run_figures import (
    counted,
    eval_area,
    mean_and_ci,
    mean_over_steps,
    paired_by_seed,
    switch_step,
)
from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import RunRecord

FIGURES = {  # name -> each run's value
    "auc": eval_area,
    "accuracy": lambda r: r.last(m.EVAL_ACCURACY),
    "entropy": lambda r: mean_over_steps(r, m.ENTROPY_MEAN),
    "k3": lambda r: mean_over_steps(r, m.MISMATCH_KL),
    "acceptance": lambda r: mean_over_steps(r, m.ACCEPTANCE_RATE),
    "staleness_token_mean": lambda r: mean_over_steps(r, m.STALENESS_TOKEN_MEAN),
    "switch_step": switch_step,
    "tokens_cut_sequence_stage": lambda r: r.total(m.TOKENS_CUT_SEQUENCE_STAGE),
    "tokens_cut_token_stage": lambda r: r.total(m.TOKENS_CUT_TOKEN_STAGE),
}
PAIRED = ("auc", "accuracy", "entropy", "k3")
PLOTTED = ("auc", "accuracy", "entropy", "k3", "acceptance", "staleness_token_mean")


def is_async(run: RunRecord) -> bool:
    return run.params.get("rollout.mode") == "async"


def rows(runs: list[RunRecord]) -> list[dict]:
    """One row per (method, eta) of the asynchronous runs, each paired by seed with the same
    method at eta 0, and its AUC with synchronous grpo's where those runs are among `runs`."""
    points: dict[tuple[str, int], list[RunRecord]] = {}
    for run in filter(is_async, runs):
        points.setdefault((run.method, int(run.params["rollout.eta"])), []).append(run)
    sync_grpo = {
        r.seed: r for r in counted(r for r in runs if r.method == "grpo" and not is_async(r))
    }
    out = []
    for (method, eta), group in sorted(points.items()):
        done = counted(group)
        row: dict = {"method": method, "eta": eta, "seeds": len(done)}
        for name, value in FIGURES.items():
            row[name], row[f"{name}_ci95"] = mean_and_ci(done, value)
        base = {r.seed: r for r in counted(points.get((method, 0), []))}
        for name in PAIRED:
            paired = paired_by_seed(done, base, FIGURES[name]) if eta else (None, None, None)
            columns = (f"{name}_vs_eta0", f"{name}_vs_eta0_ci95", f"{name}_vs_eta0_mde80")
            row |= dict(zip(columns, paired, strict=True))
        vs_grpo = paired_by_seed(done, sync_grpo, eval_area)
        row |= dict(
            zip(("auc_vs_grpo", "auc_vs_grpo_ci95", "auc_vs_grpo_mde80"), vs_grpo, strict=True)
        )
        row["switched_seeds"] = sum(switch_step(r) is not None for r in done)
        row["per_seed"] = {
            str(r.seed): {name: value(r) for name, value in FIGURES.items()} for r in done
        }
        out.append(row)
    return out


def _switch(row: dict) -> str:
    if not row["switched_seeds"]:
        return "-"
    steps = sorted({v["switch_step"] for v in row["per_seed"].values() if v["switch_step"]})
    when = f"{steps[0]}" if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"
    return f"{when} ({row['switched_seeds']} of {row['seeds']} seeds)"


MD_COLUMNS = {  # header -> a row's cell
    "method": lambda r: r["method"],
    "eta": lambda r: str(r["eta"]),
    "seeds": lambda r: str(r["seeds"]),
    "AUC (± 95%)": lambda r: pm(r, "auc"),
    "Δ AUC vs eta 0 (± 95%; detectable)": lambda r: pm(r, "auc_vs_eta0"),
    "Δ AUC vs sync grpo (± 95%; detectable)": lambda r: pm(r, "auc_vs_grpo"),
    "final accuracy (± 95%)": lambda r: pm(r, "accuracy", 3),
    "Δ final vs eta 0": lambda r: pm(r, "accuracy_vs_eta0", 3),
    "entropy, mean over steps": lambda r: cell(r, "entropy", ".3f"),
    "Δ entropy vs eta 0": lambda r: pm(r, "entropy_vs_eta0", 3),
    "versions behind, per token": lambda r: cell(r, "staleness_token_mean", ".2f"),
    "k3": lambda r: cell(r, "k3", ".4f"),
    "acceptance": lambda r: cell(r, "acceptance", ".2f"),
    "tokens cut, sequence / token stage": lambda r: (
        "-"
        if r["tokens_cut_sequence_stage"] is None
        else f"{r['tokens_cut_sequence_stage'] / 1e3:.0f}k / {r['tokens_cut_token_stage']:.0f}"
    ),
    "switch step": _switch,
}


def markdown(table: list[dict]) -> list[dict[str, str]]:
    """docs/results.md's table: one row of formatted cells per row of `table`."""
    return [{header: cell_of(row) for header, cell_of in MD_COLUMNS.items()} for row in table]


def plot(table: list[dict], folder: Path) -> list[Path]:
    """A PNG per figure against eta (`NAME_vs_eta.png`), and for the paired figures a PNG of
    the paired difference to the same method at eta 0 (`NAME_vs_eta0.png`, 0 at eta 0 by
    definition; a method whose eta-0 runs are missing has no line there)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    charts = [(name, name, "mean over seeds", f"{name}_vs_eta") for name in PLOTTED]
    charts += [
        (f"{name}_vs_eta0", f"{name} - {name} at eta 0", "paired by seed", f"{name}_vs_eta0")
        for name in PAIRED
    ]
    paths = []
    for key, label, what, stem in charts:
        figure, axes = plt.subplots(figsize=(6, 4))
        for color, method in enumerate(dict.fromkeys(r["method"] for r in table)):
            mine = [r for r in table if r["method"] == method and _plotted(r, key)]
            if not mine:
                continue
            axes.errorbar(
                [r["eta"] for r in mine],
                [r[key] or 0.0 for r in mine],
                yerr=[r[f"{key}_ci95"] or 0.0 for r in mine],
                marker="o",
                capsize=3,
                label=method,
                color=f"C{color}",  # a method's colour is the same in every chart
            )
        if key.endswith("_vs_eta0"):
            axes.axhline(0.0, color="grey", linewidth=0.8)
        axes.set_xscale("symlog", linthresh=1)
        axes.set_xlabel("rollout.eta (versions)")
        axes.set_ylabel(label)
        axes.set_title(f"{label} against staleness ({what}, 95% interval)", fontsize=10)
        axes.legend(fontsize=8)
        path = folder / f"{stem}.png"
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)
        paths.append(path)
    return paths


def _plotted(row: dict, key: str) -> bool:
    """A point for `key`: its value, or, for a difference to eta 0, eta 0 itself (0 there)
    when the method's eta-0 runs are in (its later rows then carry a paired difference)."""
    if not key.endswith("_vs_eta0"):
        return row[key] is not None
    return row[key] is not None or (
        row["eta"] == 0 and row[key.removesuffix("_vs_eta0")] is not None
    )
