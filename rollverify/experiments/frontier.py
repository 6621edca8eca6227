"""The cost-accuracy frontier: what each method (and setting) buys per GPU-day saved, against a
baseline of the user's choosing (`rvctl report --frontier [--vs METHOD[,KEY=VALUE]] [--by KEY]`).

One point per group of runs (vs_baseline.py's groups: a method, and its values of the --vs and
--by keys), paired with the baseline's run of the same seed:
- x, `cost`: the run's modeled GPU-days over its baseline twin's, mean over the paired seeds
  with its 95% interval (1.0: the baseline's cost; 0.4: 60% saved);
- y, `auc_vs_base` and `accuracy_vs_base`: the paired differences in AUC and in final accuracy,
  with their 95% intervals and the smallest difference the pairs detect at 80% power.
A point is on the Pareto set when no other point against the same baseline (grpo at the same
learning rate, say), the baseline's own (1.0, 0.0) included, costs no more and gains no less
AUC with one of the two strictly better: the means decide, and the intervals say how far to
trust them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rollverify.experiments import vs_baseline
from rollverify.experiments.cells import FEW_PAIRS, pm
from rollverify.experiments.power import FEWEST_PAIRS, mean_ci95
from rollverify.experiments.run_figures import present
from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import RunRecord

BASELINE = {vs_baseline.METHOD: "grpo"}


def modeled_days(run: RunRecord) -> float | None:
    return run.last(m.MODELED_GPU_DAYS)


def cost_ratio(runs: Sequence[RunRecord], base: dict[int, RunRecord]) -> tuple:
    """(mean, 95% half-width, pairs) of each run's modeled GPU-days over its seed's twin's; no
    interval under FEWEST_PAIRS pairs."""
    ratios = []
    for run in runs:
        twin = base.get(run.seed)
        mine, theirs = modeled_days(run), modeled_days(twin) if twin else None
        if mine is not None and theirs:
            ratios.append(mine / theirs)
    mean, ci95 = mean_ci95(present(ratios))
    if len(ratios) < FEWEST_PAIRS:  # as for the paired differences: too few for an interval
        ci95 = None
    return mean, ci95, len(ratios)


def frontier_rows(
    runs: list[RunRecord], vs: dict[str, str] = BASELINE, by: tuple[str, ...] = ()
) -> list[dict]:
    """One point per group of `runs` against its baseline (see the module), Pareto set marked."""
    points = []
    for method, values, wanted, group, base in vs_baseline.paired_groups(runs, vs, by):
        point: dict = {"point": label(method, values, group[0]), "method": method, **values}
        point["seeds"] = len(group)
        point["baseline"] = ", ".join(f"{k}={v}" for k, v in wanted.items())
        point["cost"], point["cost_ci95"], point["pairs"] = cost_ratio(group, base)
        for name in vs_baseline.FIGURES:
            point |= vs_baseline.paired_columns(name, group, base)
        points.append(point)
    baseline = {"cost": 1.0, "auc_vs_base": 0.0}  # the baseline's own point
    placed = [p for p in points if p["pairs"] >= FEWEST_PAIRS]  # means worth ordering
    for point in points:
        # against its own baseline's points only: a point at lr/4 paired with grpo at lr/4
        # and one at lr/16 paired with grpo at lr/16 are on two frontiers, not one
        alike = [p for p in placed if p["baseline"] == point["baseline"]]
        enough = point["pairs"] >= FEWEST_PAIRS
        point["pareto"] = on_pareto(point, [baseline, *alike]) if enough else None
    return points


def on_pareto(point: dict, points: list[dict]) -> bool | None:
    """No other point costs no more and gains no less, one of them strictly (None: no cost or
    no difference to place it by)."""
    cost, gain = point.get("cost"), point.get("auc_vs_base")
    if cost is None or gain is None:
        return None
    for other in points:
        if other is point or other.get("cost") is None or other.get("auc_vs_base") is None:
            continue
        no_worse = other["cost"] <= cost and other["auc_vs_base"] >= gain
        if no_worse and (other["cost"] < cost or other["auc_vs_base"] > gain):
            return False
    return True


def label(method: str, values: dict[str, str], run: RunRecord) -> str:
    """What the runs of a point are: the method, and its values of the grouping keys (an eta
    only where `run`, one of them, is asynchronous: a synchronous run has no staleness bound)."""
    shown = dict(values)
    if run.params.get("rollout.mode") != "async":
        shown.pop("rollout.eta", None)
    return ", ".join([method, *(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in shown.items())])


def plot(points: list[dict], folder: Path, figure_name: str = "frontier.png") -> Path:
    """x: modeled GPU-days relative to the baseline; y: paired ΔAUC; 95% intervals on both
    axes; the Pareto set joined by a line, the baseline at (1, 0)."""
    from matplotlib.figure import Figure as Canvas

    folder.mkdir(parents=True, exist_ok=True)
    placed = [p for p in points if p["cost"] is not None and p["auc_vs_base"] is not None]
    figure = Canvas(figsize=(11, 5.5))  # the legend beside the axes, not over the points
    axes = figure.subplots()
    for color, point in enumerate(placed):
        axes.errorbar(
            point["cost"],
            point["auc_vs_base"],
            xerr=point["cost_ci95"] or 0.0,
            yerr=point["auc_vs_base_ci95"] or 0.0,
            marker="o" if point["pareto"] else "s",
            capsize=3,
            color=f"C{color % 10}",
            linestyle="none",
            fillstyle="full" if color < 10 else "none",  # past ten colors: hollow markers
            label=f"{point['point']} (n={point['pairs']})" + (" *" if point["pareto"] else ""),
        )
    for baseline in dict.fromkeys(p["baseline"] for p in placed):  # one frontier per baseline
        best = [
            (p["cost"], p["auc_vs_base"])
            for p in placed
            if p["pareto"] and p["baseline"] == baseline
        ]
        best = sorted([(1.0, 0.0), *best])
        axes.plot(*zip(*best, strict=True), color="grey", linewidth=0.8, linestyle="--")
    axes.scatter([1.0], [0.0], marker="*", s=150, color="black", label="baseline", zorder=3)
    axes.axhline(0.0, color="grey", linewidth=0.5)
    axes.set_xlabel("modeled GPU-days / the baseline's (paired by seed)")
    axes.set_ylabel("Δ AUC vs the baseline (paired by seed)")
    fewest = f"{FEWEST_PAIRS} pairs"
    axes.set_title(
        f"cost-accuracy frontier: 95% intervals from {fewest} on, none under (n: a point's "
        f"pairs); *: Pareto set, of the points with {fewest} or more",
        fontsize=9,
    )
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    figure.tight_layout()
    path = folder / figure_name
    figure.savefig(path, dpi=100)
    return path


def pareto_cell(point: dict) -> str:
    """'*' on the Pareto set; 'n<3' where too few pairs place a point; '-' where nothing does."""
    if point["pareto"] is None:
        return FEW_PAIRS if 0 < point["pairs"] < FEWEST_PAIRS else "-"
    return "*" if point["pareto"] else ""


def markdown(points: list[dict]) -> list[dict[str, str]]:
    """The frontier's table: one row of formatted cells per point."""
    return [
        {
            "point": p["point"],
            "seeds (paired)": f"{p['seeds']} ({p['pairs']})",
            "cost vs baseline (± 95%)": pm(p, "cost", 3, paired=True),
            "Δ AUC (± 95%; detectable)": pm(p, "auc_vs_base"),
            "Δ final accuracy (± 95%)": pm(p, "accuracy_vs_base", 3),
            "Pareto": pareto_cell(p),
        }
        for p in points
    ]
