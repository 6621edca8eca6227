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
    runs: list[RunRecord],
    vs: dict[str, str] = BASELINE,
    by: tuple[str, ...] = (),
    margin: float | None = None,
) -> list[dict]:
    """One point per group of `runs` against its baseline (see the module), Pareto set marked."""
    points = []
    for method, values, wanted, group, base in vs_baseline.paired_groups(runs, vs, by):
        point: dict = {"point": label(method, values, group[0]), "method": method, **values}
        point["seeds"] = len(group)
        point["baseline"] = ", ".join(f"{k}={v}" for k, v in wanted.items())
        point["cost"], point["cost_ci95"], point["pairs"] = cost_ratio(group, base)
        for name in vs_baseline.FIGURES:
            point |= vs_baseline.paired_columns(name, group, base, margin)
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


FAMILIES = ("on-policy", "partial", "sample filter", "loss reweighting", "loss correction")
FAMILIES += ("RollVerify",)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")  # a family's settings, in turn


def family(method: str) -> str:
    """The kind of method a point is, for its colour: on-policy, partial, sample filter, loss
    reweighting (TRL's losses), loss correction (the peers'), RollVerify (verification)."""
    from rollverify.core.methods import METHODS

    known = METHODS.get(method)
    if known is None or not known.partial:
        return "on-policy" if known is not None else "partial"
    if known.verify:
        return "RollVerify"
    if known.correction is not None:
        return "loss correction"
    if known.trl_overrides:
        return "loss reweighting"
    return "sample filter" if known.sample_filter else "partial"


def plot(
    points: list[dict],
    folder: Path,
    figure_name: str = "frontier.png",
    margin: float | None = None,
) -> Path:
    """x: modeled GPU-days relative to the baseline; y: paired ΔAUC; 95% intervals on both
    axes (from 3 pairs on). A colour per method family (FAMILIES), a marker per setting within
    it, filled on the Pareto set, whose points are numbered on the axes ([k] in the legend) and
    joined by a dashed line per baseline; the margin's band shaded (within M of the
    baseline); the baseline at (1, 0). The legend beside the axes lists the points by family."""
    from matplotlib.figure import Figure as Canvas
    from matplotlib.lines import Line2D

    folder.mkdir(parents=True, exist_ok=True)
    placed = [p for p in points if p["cost"] is not None and p["auc_vs_base"] is not None]
    placed.sort(key=lambda p: FAMILIES.index(family(p["method"])))  # the legend by family
    figure = Canvas(figsize=(14, 8))
    axes = figure.add_axes((0.07, 0.08, 0.55, 0.84))
    if margin is not None:
        axes.axhspan(-margin, 0.0, color="tab:green", alpha=0.10, zorder=0)
        axes.axhline(-margin, color="tab:green", linewidth=0.8, linestyle=":")
    seen: dict[str, int] = {}
    numbered = 0
    labelled: list[tuple] = []  # where the Pareto numbers are
    for point in placed:
        kind = family(point["method"])
        shade = f"C{FAMILIES.index(kind) % 10}"
        marker = MARKERS[seen.setdefault(kind, 0) % len(MARKERS)]
        seen[kind] += 1
        name = _short(point["point"])
        if point["pareto"]:
            numbered += 1
            name = f"[{numbered}] {name}"
            # a point at the place of an earlier one (two methods that ran the same) gets its
            # number beside that one's, not on top of it
            at = (point["cost"], point["auc_vs_base"])
            beside = 10 * labelled.count(at)
            labelled.append(at)
            axes.annotate(f"{numbered}", at, fontsize=9, fontweight="bold",
                          xytext=(4 + beside, 4), textcoords="offset points",
                          color=shade)  # fmt: skip
        axes.errorbar(
            point["cost"],
            point["auc_vs_base"],
            xerr=point["cost_ci95"] or 0.0,
            yerr=point["auc_vs_base_ci95"] or 0.0,
            marker=marker,
            markersize=7,
            capsize=2,
            elinewidth=0.7,
            color=shade,
            linestyle="none",
            fillstyle="full" if point["pareto"] else "none",
            label=f"{name} (n={point['pairs']})",
        )
    for baseline in dict.fromkeys(p["baseline"] for p in placed):  # one frontier per baseline
        best = [
            (p["cost"], p["auc_vs_base"])
            for p in placed
            if p["pareto"] and p["baseline"] == baseline
        ]
        best = sorted([(1.0, 0.0), *best])
        axes.plot(*zip(*best, strict=True), color="grey", linewidth=0.8, linestyle="--")
    axes.scatter([1.0], [0.0], marker="*", s=180, color="black", label="baseline", zorder=3)
    axes.axhline(0.0, color="grey", linewidth=0.5)
    axes.set_xlabel("modeled GPU-days / the baseline's (paired by seed; 0.4: 60% saved)")
    axes.set_ylabel("Δ AUC vs the baseline (paired by seed)")
    fewest = f"{FEWEST_PAIRS} pairs"
    within = f"; green: within {margin:g} of it" if margin is not None else ""
    axes.set_title(
        f"cost against accuracy, each point against its baseline{within}\n95% intervals from "
        f"{fewest} on (n: a point's pairs); filled and numbered: the Pareto set",
        fontsize=10,
    )
    families = [kind for kind in FAMILIES if kind in seen]
    handles = [
        Line2D([], [], color=f"C{FAMILIES.index(k) % 10}", marker="o", linestyle="none")
        for k in families
    ]
    legend = axes.legend(handles, families, title="family", fontsize=8, loc="lower right")
    axes.add_artist(legend)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                frameon=False)  # fmt: skip
    path = folder / figure_name
    figure.savefig(path, dpi=100, bbox_inches="tight")  # no blank canvas past a short legend
    return path


def _short(label: str) -> str:
    """A point's label as the figure's legend shows it: without the defaults it repeats."""
    for default in (", mode=sync", ", switch_threshold=None"):
        label = label.replace(default, "")
    return label


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
        | vs_baseline.margin_cells(p)
        for p in points
    ]
