"""What every threshold of the grid would have done in these runs: `rvctl report RUN...
--thresholds` (docs/experiments.md), from the acceptance each grid point would have given at
each check (threshold_grid/<point>, rollverify/core/threshold_grid.py).

Per grid point, over the runs (seeds), the acceptance window replayed as switching counts it
(core/switching.py: a rate per check, the window of verify.window checks, the switch where a
full window's mean falls below verify.switch_threshold):
- `first_window`: the first full window's mean (where the switch is first decided);
- `lowest_window`: the lowest mean of a full window;
- `late_window`: the full window ending at the last check at or before 85% of the run's steps
  (the paper's late decline: is it below the first?); None where the checks stopped earlier
  (a switch);
- `switch_steps`: the step at which its window would have switched, per run (None: never,
  within the run's checks);
- `regenerated`: the share of the checked tokens it would have cut (and so regenerated).
Within each run's own checks only: a run that switched checks no more, and a check's cache is
the one the run's own thresholds left (the grid's numbers are exact for that check, not a
replay of another run). The row of the run's own thresholds is marked (`own`).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from rollverify.core.switching import AcceptanceMonitor
from rollverify.experiments.cells import cell, pm
from rollverify.experiments.power import mean_ci95
from rollverify.experiments.run_figures import present
from rollverify.experiments.step_size import LATE  # (--table step-size: the run's own window)
from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import RunRecord


def points(runs: list[RunRecord]) -> list[str]:
    """The grid points the runs logged, in the order logged (ds ascending, then auto)."""
    found = dict.fromkeys(
        name.removeprefix(m.THRESHOLD_GRID_PREFIX)
        for run in runs
        for name in run.history
        if name.startswith(m.THRESHOLD_GRID_PREFIX)
    )
    return sorted(found, key=_order)


def _order(label: str) -> tuple:
    kind, _, rest = label.partition("_")
    number = rest.split("_")[0].removeprefix("c")
    return (kind != "ds", float(number), label)


def checks(run: RunRecord, point: str) -> list[tuple[int, float, float]]:
    """(step, the point's acceptance, tokens checked) at each step the run checked a cache."""
    rates = run.history.get(m.threshold_grid(point), {})
    checked = run.history.get(m.CACHE_TOKENS_VERIFIED, {})
    return [(step, rates[step], checked[step]) for step in sorted(rates) if checked.get(step)]


def replay(run: RunRecord, point: str) -> dict:
    """One run's figures for one grid point (see the module)."""
    window = int(run.params.get("verify.window", 8))
    monitor = AcceptanceMonitor(window, float(run.params.get("verify.switch_threshold", 0.5)))
    windows, cut, total = {}, 0.0, 0.0  # the step a full window ends at -> its mean
    steps = run.params.get("train.steps")
    for step, rate, tokens in checks(run, point):
        monitor.update(rate * tokens, tokens, step=step)
        cut, total = cut + (1 - rate) * tokens, total + tokens
        if len(monitor.history) >= window:
            windows[step] = monitor.window_mean
    return {
        "first_window": next(iter(windows.values()), None),
        "lowest_window": min(windows.values(), default=None),
        "late_window": _late(windows, round(LATE * int(steps))) if steps else None,
        "switch_step": monitor.switch_step,
        "regenerated": cut / total if total else None,
    }


def _late(windows: dict[int, float], late_step: int) -> float | None:
    """The window ending at the last check at or before `late_step` (the step --table
    step-size reads the run's own window at), if the checks went on that far (a run that
    switched checks no more)."""
    ends = [step for step in windows if step <= late_step]
    if not ends or max(windows) < late_step - 1:
        return None
    return windows[max(ends)]


def own_point(run: RunRecord) -> str | None:
    """The grid point of the run's own thresholds (its ds with its dt), if the grid has it."""
    try:
        ds = float(run.params.get("verify.ds", "nan"))
    except ValueError:  # auto
        c = run.params.get("verify.drift_versions", "2.0")
        return f"auto_c{float(c):g}" if run.params.get("verify.dt") == "auto" else None
    return f"ds_{ds:g}" if ds == ds else None


def rows(runs: list[RunRecord]) -> list[dict]:
    """One row per grid point, over `runs` (see the module)."""
    runs = [run for run in runs if any(k.startswith(m.THRESHOLD_GRID_PREFIX) for k in run.history)]
    owns = {own_point(run) for run in runs}
    table = []
    for point in points(runs):
        replays = [replay(run, point) for run in runs]
        row: dict = {"point": point, "own": point in owns, "runs": len(replays)}
        for figure in ("first_window", "lowest_window", "late_window", "regenerated"):
            row[figure], row[f"{figure}_ci95"] = mean_ci95(present(r[figure] for r in replays))
        row["declined"] = sum(
            r["late_window"] < r["first_window"] for r in replays if r["late_window"] is not None
        )
        row["late_runs"] = sum(r["late_window"] is not None for r in replays)
        steps = [r["switch_step"] for r in replays]
        row["switched"] = sum(s is not None for s in steps)
        row["switch_steps"] = steps
        switched = [s for s in steps if s is not None]
        row["switch_step_median"] = statistics.median(switched) if switched else None
        table.append(row)
    return table


def markdown(table: list[dict]) -> list[dict[str, str]]:
    """The table's cells; a dt variant (_dt_scaled, _dt_run) only where it differs from its
    point with the other dt (json: every row)."""
    cells = [_cells(row) for row in table]
    main = {row["point"]: c for row, c in zip(table, cells, strict=True)}
    return [
        c
        for row, c in zip(table, cells, strict=True)
        if "_dt_" not in row["point"]
        or _figures(c) != _figures(main[row["point"].split("_dt_")[0]])
    ]


def _figures(cells: dict[str, str]) -> list[str]:
    return [v for k, v in cells.items() if k != "point"]


def _cells(row: dict) -> dict[str, str]:
    return {
        "point": row["point"] + (" (the run's)" if row["own"] else ""),
        "first window (± 95%)": pm(row, "first_window", 3),
        "lowest window": pm(row, "lowest_window", 3),
        "window at 85% (below the first)": pm(row, "late_window", 3)
        + (f" ({row['declined']}/{row['late_runs']})" if row["late_runs"] else ""),
        "would switch (step)": f"{row['switched']}/{row['runs']}"
        + (f" ({cell(row, 'switch_step_median', 'g')})" if row["switched"] else ""),
        "regenerated": pm(row, "regenerated", 3),
    }


def plot(runs: list[RunRecord], folder: Path) -> Path:
    """thresholds.png: each grid point's acceptance window over the steps (the mean over
    runs of its replayed window), the switch threshold drawn, the runs' own point bold."""
    from matplotlib.figure import Figure as Canvas

    folder.mkdir(parents=True, exist_ok=True)
    figure = Canvas(figsize=(10, 5.5))
    axes = figure.subplots()
    owns = {own_point(run) for run in runs}
    labels = [p for p in points(runs) if "_dt_" not in p]  # (the dt variants: the table)
    for color, point in enumerate(labels):
        by_step: dict[int, list[float]] = {}
        for run in runs:
            for step, mean in _windows(run, point).items():
                by_step.setdefault(step, []).append(mean)
        steps = sorted(by_step)
        if not steps:
            continue
        means = [statistics.fmean(by_step[s]) for s in steps]
        own = point in owns
        axes.plot(steps, means, color=f"C{color % 10}", linewidth=2.5 if own else 1.0,
                  linestyle="-" if point.startswith("ds") else "--",
                  label=point + (" (the run's)" if own else ""))  # fmt: skip
    threshold = float(runs[0].params.get("verify.switch_threshold", 0.5)) if runs else 0.5
    axes.axhline(threshold, color="black", linewidth=0.8, linestyle=":")
    axes.text(0.01, threshold, " switch threshold", transform=axes.get_yaxis_transform(),
              va="bottom", fontsize=8)  # fmt: skip
    axes.set_ylim(0, 1.02)
    axes.set_xlabel("training step")
    axes.set_ylabel("acceptance, window mean (as switching counts it; the mean so far until full)")
    axes.set_title(
        f"what each ds would have kept at each check ({len(runs)} run(s); mean over them)",
        fontsize=10,
    )
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    figure.tight_layout()
    path = folder / "thresholds.png"
    figure.savefig(path, dpi=100)
    return path


def _windows(run: RunRecord, point: str) -> dict[int, float]:
    """The replayed window mean at each checked step (from the first check on)."""
    monitor = AcceptanceMonitor(int(run.params.get("verify.window", 8)))
    out = {}
    for step, rate, tokens in checks(run, point):
        monitor.update(rate * tokens, tokens)
        out[step] = monitor.window_mean
    return out
