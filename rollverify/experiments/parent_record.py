"""A finished comparison's or sweep's report on its MLflow parent run: the report's rows as a
table artifact (report.json, MLflow's table format: the UI shows and compares it), the headline
figures of each row as metrics (`<row>/eval_accuracy_mean`, ...), and the curves as PNGs
(plots/). What `rvctl report FOLDER` prints, kept where the runs are."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

from rollverify.infra.atomic_write import atomic_write_text
from rollverify.infra.faults import describe

HEADLINE = (
    "eval_auc_mean",
    "eval_accuracy_mean",
    "eval_accuracy_ci95",
    "device_days",
    "device_speedup_vs_grpo",
    "modeled_gpu_days",
    "modeled_speedup_vs_grpo",
    "acceptance_rate_final",
)


def record_report(parent: Any, folder: Path) -> None:
    """`parent`: the MLflowTracker of the comparison or sweep in `folder`. A store that refuses
    is warned about: the report can still be printed from the child runs."""
    try:
        _record(parent, folder)
    except Exception as error:
        warnings.warn(f"report not stored on the parent run: {describe(error)}", stacklevel=2)


def _record(parent: Any, folder: Path) -> None:
    from rollverify.experiments.report import method_rows, run_groups, short_names, sweep_rows
    from rollverify.tracking.plots import plot_metrics
    from rollverify.tracking.run_records import load_report

    found = load_report([str(folder)], parent.uri)
    if found.kind == "sweep":
        rows = sweep_rows(found.runs, found.sweep_params)
        names = dict.fromkeys((*short_names(found.sweep_params), "method"))  # once each
        keys = [k for k in names if rows and k in rows[0]]
    else:
        rows, keys = method_rows(found.runs), ["method"]
    if not rows:
        return
    columns = list(dict.fromkeys(column for row in rows for column in row))
    table = {"columns": columns, "data": [[row.get(c) for c in columns] for row in rows]}
    # (MLflow's table format, written whole: log_table would append to a resumed parent's)
    path = folder / "report.json"
    atomic_write_text(path, json.dumps(table, indent=2, default=_plain) + "\n")
    parent.log_artifacts([path])
    metrics = {
        f"{row_name(row, keys)}/{name}": row[name]
        for row in rows
        for name in HEADLINE
        if isinstance(row.get(name), int | float) and math.isfinite(row[name])
    }
    parent.log_metrics(metrics, step=0)
    parent.log_artifacts(plot_metrics(run_groups(found), folder / "plots"), "plots")


def _plain(value: Any) -> Any:
    """numpy numbers and the like, as JSON takes them."""
    return value.item() if hasattr(value, "item") else str(value)


def row_name(row: dict[str, Any], keys: list[str]) -> str:
    """A row as a metric-name prefix: "rollverify", "ds_0.01-dt_2" (MLflow allows letters,
    digits, _ - . / space and colon in names)."""
    if keys == ["method"]:
        text = str(row["method"])
    else:
        text = "-".join(f"{key}_{row[key]}" for key in keys)
    return re.sub(r"[^\w.\-]", "_", text)
