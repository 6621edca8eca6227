"""The composition control of the staleness study (docs/results.md): runs that separate which
groups train first from how stale their tokens are, each paired by seed with synchronous grpo.

    rvctl report runs/sweep-method-2* runs/sweep-method-eta-* runs/sweep-method-max_staleness-* \
        runs/sweep-method-batch_order-* --table composition [--out F.json] [-f md]

Rows are labelled by method and the settings that make them differ (rollout.mode, eta,
batch_order, max_staleness), so runs of one method from several sweeps stay apart. Per row:
AUC (the primary figure) and final accuracy, each with its paired difference to synchronous
grpo (95% interval, the smallest difference detectable at 80% power), a control's paired
difference to the run it controls (its twin: start-order batches against completion order at the
same eta, a staleness cap against the uncapped run), the mean trained length
over the first 20 steps (which groups train first), per-token staleness and the share of
tokens 8+ versions old, k3, and the groups the staleness cap dropped (what max_staleness 0
starves).
"""

from __future__ import annotations

from rollverify.experiments.cells import cell, pm
from rollverify.experiments.run_figures import (
    counted,
    eval_area,
    mean_and_ci,
    mean_over_steps,
    paired_by_seed,
)
from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import RunRecord

SETTINGS = ("rollout.mode", "rollout.eta", "rollout.batch_order", "rollout.max_staleness")
EARLY = 20  # steps whose trained lengths say which groups train first


def label(run: RunRecord) -> str:
    params = run.params
    parts = [run.method]
    if params.get("rollout.mode") == "async":
        parts.append(f"async eta={params.get('rollout.eta')}")
        if params.get("rollout.batch_order", "complete") != "complete":
            parts.append(f"{params['rollout.batch_order']} order")
    elif params.get("rollout.max_staleness", "None") not in ("None", "null", None):
        parts.append(f"max_staleness={params['rollout.max_staleness']}")
    return ", ".join(parts)


FIGURES = {
    "auc": eval_area,
    "accuracy": lambda r: r.last(m.EVAL_ACCURACY),
    "early_length": lambda r: mean_over_steps(r, m.RESPONSE_LENGTH_MEAN, EARLY),
    "staleness_token_mean": lambda r: mean_over_steps(r, m.STALENESS_TOKEN_MEAN),
    "stale_token_share_8": lambda r: mean_over_steps(r, m.STALE_TOKEN_SHARE_8),
    "k3": lambda r: mean_over_steps(r, m.MISMATCH_KL),
    "entropy": lambda r: mean_over_steps(r, m.ENTROPY_MEAN),
    "dropped_stale": lambda r: r.total(m.TRAJECTORIES_DROPPED_STALE),
}
PAIRED = ("auc", "accuracy", "early_length")


def twin(name: str) -> str | None:
    """The run a control controls: start-order batches against the same run in completion
    order (same staleness, other groups first); a staleness cap against the uncapped run."""
    for control in (", start order", ", max_staleness="):
        if control in name:
            return name.split(control)[0]
    return None


def rows(runs: list[RunRecord]) -> list[dict]:
    groups: dict[str, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault(label(run), []).append(run)
    by_seed = {name: {r.seed: r for r in counted(group)} for name, group in groups.items()}
    out = []
    for name, group in groups.items():
        done = counted(group)
        row: dict = {"run": name, "seeds": len(done)}
        for figure, value in FIGURES.items():
            row[figure], row[f"{figure}_ci95"] = mean_and_ci(done, value)
        controlled = twin(name)
        for against, suffix in (("grpo", "vs_grpo"), (controlled, "vs_twin")):
            if against is None or against == name:
                continue
            for figure in PAIRED:
                columns = (
                    f"{figure}_{suffix}",
                    f"{figure}_{suffix}_ci95",
                    f"{figure}_{suffix}_mde80",
                )
                difference = paired_by_seed(done, by_seed.get(against, {}), FIGURES[figure])
                row |= dict(zip(columns, difference, strict=True))
        row["twin"] = controlled
        row["per_seed"] = {str(r.seed): {f: v(r) for f, v in FIGURES.items()} for r in done}
        out.append(row)
    return out


MD_COLUMNS = {  # header -> a row's cell
    "run": lambda r: r["run"],
    "seeds": lambda r: str(r["seeds"]),
    "AUC (± 95%)": lambda r: pm(r, "auc"),
    "Δ AUC vs grpo (± 95%; detectable)": lambda r: pm(r, "auc_vs_grpo"),
    "Δ AUC vs its twin (± 95%; detectable)": lambda r: pm(r, "auc_vs_twin"),
    "final accuracy (± 95%)": lambda r: pm(r, "accuracy", 3),
    "Δ final vs grpo": lambda r: pm(r, "accuracy_vs_grpo", 3),
    "trained length, steps 1-20": lambda r: cell(r, "early_length", ".1f"),
    "versions behind, per token": lambda r: cell(r, "staleness_token_mean", ".2f"),
    "tokens 8+ versions old": lambda r: cell(r, "stale_token_share_8", ".1%"),
    "k3": lambda r: cell(r, "k3", ".4f"),
    "entropy, mean over steps": lambda r: cell(r, "entropy", ".3f"),
    "trajectories dropped (cap)": lambda r: cell(r, "dropped_stale", ".0f"),
}


def markdown(table: list[dict]) -> list[dict[str, str]]:
    """docs/results.md's table: one row of formatted cells per row of `table`."""
    return [{header: cell_of(row) for header, cell_of in MD_COLUMNS.items()} for row in table]
