"""Training curves as PNG files: one per metric, one line per group (method or grid point).

A line is the mean over the group's runs at each step; with >= 2 runs, the band between their
min and max is shaded, unless more than MAX_BANDED_CURVES lines share the axes (overlapping
bands would hide every line; the legend then says "mean over seeds"). Matplotlib's object
API with the Agg canvas: no pyplot global state, no display needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rollverify.tracking import metric_names as m

if TYPE_CHECKING:
    from rollverify.tracking.run_records import RunRecord

MAX_BANDED_CURVES = 6
LINE_STYLES = ("-", "--", ":")  # past 20 lines the tab20 colours repeat: the style tells them apart

# metric name (docs/metrics.md) -> axis label
PLOT_METRICS = {
    m.REWARD_MEAN: "reward (mean)",
    m.ENTROPY_MEAN: "token entropy (mean)",
    m.OPS_MEAN: "sequence OPS (mean)",
    m.ACCEPTANCE_RATE: "acceptance rate",
    m.RESPONSE_LENGTH_MEAN: "response length (tokens)",
    m.EVAL_ACCURACY: "eval accuracy",
}


def plot_metrics(
    groups: Mapping[str, Sequence[RunRecord]],
    out_dir: Path,
    metrics: Mapping[str, str] = PLOT_METRICS,
) -> list[Path]:
    """Write `<out_dir>/<metric>.png` for each metric some run logged; return the paths."""
    import matplotlib
    from matplotlib.figure import Figure

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for metric, label in metrics.items():
        curves = {
            name: curve
            for name, runs in groups.items()
            if (curve := _curve([r.history.get(metric, {}) for r in runs])) is not None
        }
        if not curves:
            continue
        crowded = len(curves) > MAX_BANDED_CURVES  # bands of 15 methods hide every line
        figure = Figure(figsize=(9 if crowded else 7, 4.2), layout="constrained")
        axes = figure.add_subplot()
        colors = matplotlib.colormaps["tab20" if len(curves) > 10 else "tab10"].colors
        for index, (name, (steps, mean, low, high, seeds)) in enumerate(curves.items()):
            color = colors[index % len(colors)]
            sparse = len(steps) <= 20  # eval_accuracy: a few points, show them
            axes.plot(
                steps,
                mean,
                marker="o" if sparse else None,
                color=color,
                linestyle=LINE_STYLES[index // len(colors) % len(LINE_STYLES)],
                label=name,
            )
            if seeds >= 2 and not crowded:
                axes.fill_between(steps, low, high, color=color, alpha=0.2, lw=0)
        for value, text in references(groups, metric):
            axes.axhline(value, color="black", linewidth=0.8, linestyle=":", label=text)
        if metric == m.REWARD_MEAN and _mixes_partial(groups):
            figure.supxlabel(REWARD_NOTE, fontsize=7)  # (constrained layout makes room)
        axes.set(title=f"{label} vs step", xlabel="optimizer step", ylabel=label)
        axes.grid(alpha=0.3)
        title = "mean over seeds" if crowded else "mean, min-max over seeds"
        outside = {"loc": "center left", "bbox_to_anchor": (1.01, 0.5)} if crowded else {}
        axes.legend(title=title, fontsize="small", **outside)
        path = out_dir / f"{metric.replace('/', '_')}.png"  # trl/grad_norm: one file
        figure.savefig(path, dpi=120)
        paths.append(path)
    return paths


REWARD_NOTE = (
    "partial rollout trains the responses that finish first (shorter, more often right): its "
    "step reward is not grpo's batch; compare eval accuracy"
)


def references(groups: Mapping[str, Sequence[RunRecord]], metric: str) -> list[tuple]:
    """The thresholds a metric is read against, as (value, legend): the switch threshold on
    the acceptance rate, ds on the sequence OPS (the verifying runs' own; auto: none)."""
    from rollverify.core.methods import METHODS

    key = {m.ACCEPTANCE_RATE: "verify.switch_threshold", m.OPS_MEAN: "verify.ds"}.get(metric)
    name = {m.ACCEPTANCE_RATE: "switch threshold", m.OPS_MEAN: "ds"}.get(metric)
    values = set()
    for runs in groups.values():
        for run in runs:
            method = METHODS.get(run.method)
            if key is None or method is None or not method.verify:
                continue
            try:
                values.add(float(run.params[key]))
            except (KeyError, ValueError):  # not logged; ds: auto
                continue
    return [(v, f"{name} {v:g}") for v in sorted(values)]


def _mixes_partial(groups: Mapping[str, Sequence[RunRecord]]) -> bool:
    from rollverify.core.methods import METHODS

    kinds = {
        METHODS[r.method].partial for runs in groups.values() for r in runs if r.method in METHODS
    }
    return kinds == {True, False}


def _curve(histories: Sequence[Mapping[int, float]]) -> tuple | None:
    """Per step over the runs that logged it: (steps, mean, min, max, runs with data)."""
    present = [h for h in histories if h]
    if not present:
        return None
    steps = sorted(set().union(*present))
    columns = [[h[s] for h in present if s in h] for s in steps]
    return (
        steps,
        [sum(c) / len(c) for c in columns],
        [min(c) for c in columns],
        [max(c) for c in columns],
        len(present),
    )


def plot_gaps(rows: Sequence[Mapping], knob: str, out_dir: Path) -> Path | None:
    """`<out_dir>/accuracy_gap_vs_<knob>.png` for a grid over methods and one knob: each
    method's paired accuracy difference to grpo (report.sweep_rows) against the knob's values,
    with its 95% interval; None when no row has a difference."""
    from matplotlib.figure import Figure

    lines: dict[str, list[tuple]] = {}
    for row in rows:
        if row.get("accuracy_diff_vs_grpo") is not None:
            point = (row[knob], row["accuracy_diff_vs_grpo"], row["accuracy_diff_ci95"] or 0.0)
            lines.setdefault(row["method"], []).append(point)
    if not lines:
        return None
    labels = list(dict.fromkeys(str(row[knob]) for row in rows))  # the knob's values, in order
    figure = Figure(figsize=(7, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for offset, (method, points) in enumerate(lines.items()):
        shift = (offset - (len(lines) - 1) / 2) * 0.06  # side by side, not on top
        x = [labels.index(str(value)) + shift for value, _, _ in points]
        y, error = [p[1] for p in points], [p[2] for p in points]
        axes.errorbar(x, y, yerr=error, marker="o", capsize=3, label=method)
    axes.axhline(0.0, color="grey", lw=0.8)
    axes.set_xticks(range(len(labels)), labels)
    axes.set(
        title=f"eval accuracy minus grpo's vs {knob}",
        xlabel=knob,
        ylabel="accuracy difference to grpo",
    )
    axes.grid(alpha=0.3)
    axes.legend(title="mean over seeds, paired 95% interval", fontsize="small")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"accuracy_gap_vs_{knob}.png"
    figure.savefig(path, dpi=120)
    return path
