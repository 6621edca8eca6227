"""Training curves as PNG files: one per metric, one line per group (method or grid point).

A line is the mean over the group's runs at each step; with >= 2 runs, the band between their
min and max is shaded. Matplotlib's object API with the Agg canvas: no pyplot global state, no
display needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rollverify import metrics as m

if TYPE_CHECKING:
    from rollverify.report_store import RunRecord

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
        figure = Figure(figsize=(7, 4.2), layout="constrained")
        axes = figure.add_subplot()
        for name, (steps, mean, low, high, seeds) in curves.items():
            sparse = len(steps) <= 20  # eval_accuracy: a few points, show them
            (line,) = axes.plot(steps, mean, marker="o" if sparse else None, label=name)
            if seeds >= 2:
                axes.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, lw=0)
        axes.set(title=f"{label} vs step", xlabel="optimizer step", ylabel=label)
        axes.grid(alpha=0.3)
        axes.legend(title="mean, min-max over seeds", fontsize="small")
        path = out_dir / f"{metric}.png"
        figure.savefig(path, dpi=120)
        paths.append(path)
    return paths


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
