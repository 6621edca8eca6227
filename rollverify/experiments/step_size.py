"""The step-size question of docs/results.md (issue 61): does RollVerify's switch step move with
the per-version drift as drift / ds predicts?

    rvctl report runs/sweep-method-learning_rate-* runs/sweep-method-2* --table step-size \
        [--out F.json] [-f md]

One row per group of runs (vs_baseline.py's: a method and the settings its runs differ in, the
learning rate among them), grpo's own aside, each paired by seed with grpo at its learning rate:
- the drift per version (drift_ops: the token OPS of trained tokens exactly one version old),
  mean over the run and over its first acceptance window, where the switch is first decided,
  and that first-window drift over the run's ds (its mean applied threshold where ds is auto);
- acceptance: the first window's mean, the lowest mean of a full window (one not yet full cannot
  switch), and the window mean at 85% of
  the run's steps (where the paper's switch fires, step 598 of 700), over the runs still
  verifying then;
- the switch: on how many seeds it fired, and at which steps;
- the paired ΔAUC and the modeled cost against grpo (frontier.py's);
- whether grpo itself was still climbing at the end (its mean accuracy over seeds rising over
  the last three evaluations): a step size that has not plateaued answers the drift question,
  not yet the accuracy one.
"""

from __future__ import annotations

import statistics

from rollverify.experiments import vs_baseline
from rollverify.experiments.cells import cell, pm
from rollverify.experiments.frontier import cost_ratio, label
from rollverify.experiments.power import mean_ci95
from rollverify.experiments.run_figures import mean_of_first, present, switch_step
from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import RunRecord

LATE = 0.85  # the share of training at which the paper's switch fired (598 of 700 steps)
GRPO = {vs_baseline.METHOD: "grpo"}


def window(run: RunRecord) -> int:
    return int(run.params.get("verify.window", 8))


def first_window_drift(run: RunRecord) -> float | None:
    return mean_of_first(run, m.DRIFT_OPS, window(run))


def drift_over_ds(run: RunRecord) -> float | None:
    """The first window's drift per version over the sequence-stage threshold the run applied."""
    drift = first_window_drift(run)
    try:
        ds = float(run.params.get("verify.ds", "nan"))
    except ValueError:  # auto: what it set over the same window
        ds = mean_of_first(run, m.VERIFY_DS, window(run)) or float("nan")
    return drift / ds if drift is not None and ds > 0 else None


def late_acceptance(run: RunRecord) -> float | None:
    """The acceptance window's mean at 85% of the run's steps (the last logged by then); None
    where the run had switched (or never verified) by then."""
    steps = int(run.params.get("train.steps", 0))
    history = run.history.get(m.ACCEPTANCE_WINDOW_MEAN, {})
    switched = switch_step(run)
    target = round(LATE * steps)
    if not history or (switched is not None and switched <= target):
        return None
    logged = [step for step in history if step <= target]
    return history[max(logged)] if logged else None


def lowest_full_window(run: RunRecord) -> float | None:
    """The lowest window mean over full windows only (from the window-th counted cycle on): a
    window not yet full cannot switch the run (docs/rules.md), so its lower means do not say
    how near the run came to switching."""
    counted_steps = sorted(run.history.get(m.ACCEPTANCE_RATE, {}))
    if len(counted_steps) < window(run):
        return None
    full_from = counted_steps[window(run) - 1]
    means = run.history.get(m.ACCEPTANCE_WINDOW_MEAN, {})
    return min((v for s, v in means.items() if s >= full_from), default=None)


FIGURES = {
    "drift": lambda r: r.mean(m.DRIFT_OPS),
    "drift_first_window": first_window_drift,
    "drift_over_ds": drift_over_ds,
    "acceptance_first_window": lambda r: mean_of_first(r, m.ACCEPTANCE_RATE, window(r)),
    "acceptance_lowest": lowest_full_window,
    "acceptance_late": late_acceptance,
}


def still_climbing(runs: list[RunRecord]) -> bool | None:
    """The mean evaluation accuracy over `runs` rose at each of its last two evaluations (the
    steps all runs evaluated at); None with fewer than three."""
    curves = [r.history.get(m.EVAL_ACCURACY, {}) for r in runs]
    steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    if len(steps) < 3:
        return None
    means = [statistics.fmean(c[s] for c in curves) for s in steps[-3:]]
    return means[0] < means[1] < means[2]


def rows(runs: list[RunRecord]) -> list[dict]:
    out = []
    for method, values, wanted, group, base in vs_baseline.paired_groups(runs, GRPO):
        row: dict = {"point": label(method, values, group[0]), "method": method} | values
        row["learning_rate"] = group[0].params.get("train.learning_rate")
        row["seeds"] = len(group)
        row["baseline"] = ", ".join(f"{k}={v}" for k, v in wanted.items())
        for name, figure in FIGURES.items():
            row[name], row[f"{name}_ci95"] = mean_ci95(present(figure(r) for r in group))
        switches = [switch_step(r) for r in group]
        row["switched"] = sum(s is not None for s in switches)
        row["switch_steps"] = sorted(s for s in switches if s is not None)
        row |= vs_baseline.paired_columns("auc", group, base)
        row["cost"], row["cost_ci95"], row["pairs"] = cost_ratio(group, base)
        row["grpo_climbing"] = still_climbing(list(base.values()))
        row["per_seed"] = {
            str(r.seed): {name: figure(r) for name, figure in FIGURES.items()}
            | {"switch_step": switch_step(r)}
            for r in group
        }
        out.append(row)
    return out


MD_COLUMNS = {  # header -> a row's cell
    "point": lambda r: r["point"],
    "seeds (paired)": lambda r: f"{r['seeds']} ({r['pairs']})",
    "drift per version": lambda r: pm(r, "drift"),
    "... first window": lambda r: pm(r, "drift_first_window"),
    "first-window drift / ds": lambda r: cell(r, "drift_over_ds", ".2f"),
    "acceptance, first window": lambda r: cell(r, "acceptance_first_window", ".3f"),
    "lowest full window": lambda r: pm(r, "acceptance_lowest", 3),
    "window mean at 85%": lambda r: cell(r, "acceptance_late", ".3f"),
    "switched (steps)": lambda r: (
        f"{r['switched']}/{r['seeds']}"
        + (f" ({', '.join(map(str, r['switch_steps']))})" if r["switch_steps"] else "")
    ),
    "Δ AUC vs grpo (± 95%; detectable)": lambda r: pm(r, "auc_vs_base"),
    "cost vs grpo (± 95%)": lambda r: pm(r, "cost", 3),
    "grpo still climbing": lambda r: {True: "yes", False: "no", None: "-"}[r["grpo_climbing"]],
}


def markdown(table: list[dict]) -> list[dict[str, str]]:
    """docs/results.md's table: one row of formatted cells per row of `table`."""
    return [{header: cell_of(row) for header, cell_of in MD_COLUMNS.items()} for row in table]
