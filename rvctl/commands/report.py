"""`rvctl report`: the paper's tables (and curves) from the MLflow store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from rvctl import summary
from rvctl.commands.report_study import StudyTable, check_study_options, show_study
from rvctl.options import FormatOption, WideOption
from rvctl.output import Format, print_split, stderr

# Rich table only: one-word headers (json/csv/md keep the stable keys). Rich cuts cells with
# "…" when a table is wider than the terminal, so wide tables are split (see _print).
TABLE_HEADERS = {
    "unfinished": "unfin.",
    "duplicates": "dup.",
    "eval_accuracy_before": "acc@0",
    "eval_auc_mean": "AUC",
    "eval_auc_ci95": "±AUC",
    "eval_accuracy_mean": "acc",
    "eval_accuracy_ci95": "±ci95",
    "device_days": "device-days",
    "device_speedup_vs_grpo": "speedup",
    "modeled_gpu_days": "GPU-days*",
    "modeled_speedup_vs_grpo": "speedup*",
    "ops_mean": "OPS",
    "staleness_mean": "stale",
    "mismatch_kl": "k3",
    "acceptance_rate_final": "accept-last",
    "switch_step": "switch@",
    "acceptance_window_min": "accept-min",
    "tokens_cut_sequence_stage": "cut-ds",
    "tokens_cut_token_stage": "cut-dt",
    "auc_diff_vs_grpo": "ΔAUC",
    "auc_diff_ci95": "±ΔAUC",
    "auc_mde80": "mdeAUC",
    "accuracy_diff_vs_grpo": "Δacc",
    "accuracy_diff_ci95": "±Δacc",
    "accuracy_mde80": "mdeacc",
    "device_days_diff_vs_grpo": "Δdevice-days",
    "device_days_diff_ci95": "±Δdevice",
    "modeled_gpu_days_diff_vs_grpo": "ΔGPU-days*",
    "modeled_gpu_days_diff_ci95": "±ΔGPU*",
}
FEW_PAIRS = summary.FEW_PAIRS  # the table's cell for a difference without an interval
LEGEND = (
    "AUC: area under the eval curve over the run's steps, normalised (a flat curve at "
    "accuracy a: a); acc: final eval accuracy, mean over finished seeds (±ci95: Student t "
    "half-width); "
    "acc@0: the base model; device-days: measured (on a CPU, process-days); GPU-days*: the "
    "same work priced on the cost.gpu by the cost model; speedup(*): grpo's days / the row's; "
    "stale: versions behind, k3: KL(mu || pi_old) per token, both means over steps; "
    "accept-last: the last verification cycle's acceptance rate (the live line's accept); "
    "accept-min: the lowest window mean acceptance (what switching compares with its "
    "threshold); cut-ds, cut-dt: tokens verification truncated "
    "in a run, by the sequence and the token stage; switch@: median step of the switch to "
    "on-policy; corrections (where a run made one of the peers' choices, docs/rules.md "
    "section 6): uncounted: masked tokens out of the loss's count "
    "(correction.masked_tokens_in_count false), micro-batch: M2PO's mask per pass "
    "(m2po_scope), unclipped: m2po_clip false; settings: the config values in which a "
    "method's runs differ, one row each (its Δ against grpo at the same values, else the one "
    "grpo); unfin.: "
    "runs not finished; dup.: finished runs of a seed the row already counts, left out; "
    "Δ: the row minus grpo, mean over the seeds both finished (pairs), "
    f"±Δ: its paired Student t half-width ({FEW_PAIRS}: under 3 pairs, no interval); mde: the "
    "smallest difference those pairs detect with 80% power (two-sided 5% paired t test, the "
    "observed spread)"
)


def report(
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            help="Run ids (a training run, or a compare/sweep parent) or compare/sweep output "
            "folders. Default: the newest compare/sweep in the store, else every run.",
            show_default=False,
            metavar="TARGET",
        ),
    ] = None,
    format: FormatOption = Format.table,
    plots: Annotated[
        Path | None, typer.Option(help="Also write one PNG per metric (vs step) to this folder.")
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            help="With --plots: these metrics (comma-separated names of docs/metrics.md, e.g. "
            "trl/grad_norm,response_length_p95), not reward, entropy, OPS, acceptance, length "
            "and accuracy.",
            show_default=False,
        ),
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(help="MLflow URI (default: a folder's parent.json, else ./runs/mlflow.db)."),
    ] = None,
    per_seed: Annotated[
        Path | None,
        typer.Option(
            help="Also write every finished run's own figures, one row per seed, to this file "
            "(.json, else CSV): what the table's means and intervals are computed from."
        ),
    ] = None,
    wide: WideOption = False,
    vs: Annotated[
        str | None,
        typer.Option(
            help="KEY=VALUE[,KEY=VALUE]: instead, each group of runs against the runs of its "
            "seed with these values (its own method unless train.method is among the keys), "
            "e.g. train.method=partial or verify.dt=2.",
            show_default=False,
        ),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            help="KEY[,KEY], with --vs: the baseline keeps the group's values of these keys "
            "(--vs train.method=grpo --by rollout.eta: each eta against grpo at that eta).",
            show_default=False,
        ),
    ] = None,
    table: Annotated[
        StudyTable | None,
        typer.Option(
            help="Instead, a table of the staleness study (docs/results.md): dose-response "
            "(asynchronous runs by rollout.eta, each against its eta 0 and sync grpo; --plots: "
            "a chart per figure against eta), composition (which groups train first, apart "
            "from how stale they are) or step-size (the drift per version, acceptance and "
            "switch step per learning rate, each against grpo at its learning rate).",
            show_default=False,
        ),
    ] = None,
    frontier: Annotated[
        bool,
        typer.Option(
            "--frontier",
            help="Instead, the cost-accuracy frontier: per method (and --by setting), modeled "
            "GPU-days relative to the baseline (--vs, default grpo) and the paired ΔAUC, both "
            "with 95% intervals, the Pareto set marked; --plots: frontier.png.",
        ),
    ] = False,
    margin: Annotated[
        float | None,
        typer.Option(
            help="With --frontier or --vs: mark each point within M of its baseline (AUC and "
            "final accuracy, paired by seed): shown where the one-sided 95% lower bound of the "
            "difference is above -M, ruled out where the upper one is below -M, else not "
            "decided, with the pairs that would decide it.",
            show_default=False,
        ),
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(
            help="With --frontier: the points whose label matches this regular expression "
            "(e.g. 'rollverify|opsm'), in the table and the figure; the Pareto set is still "
            "of every point.",
            show_default=False,
        ),
    ] = None,
    thresholds: Annotated[
        bool,
        typer.Option(
            "--thresholds",
            help="Instead, what every ds of verify.threshold_grid would have done in these "
            "runs: per grid point, the first full acceptance window, its lowest, the step its "
            "window would have switched at, the share it would have cut; --plots: "
            "thresholds.png.",
        ),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            help="With --vs, --frontier, --table or --thresholds: also write the rows, every "
            "figure and per seed, to this JSON file.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Accuracy, GPU-days and speedup per method (or per grid point of a sweep); or, with --vs
    or --table, the staleness study's paired tables; with --frontier, cost against accuracy."""
    check_study_options(vs, by, table, frontier, thresholds, margin, only)
    study = bool(vs or table or frontier or thresholds)
    if out is not None and not study:
        raise ValueError("--out: writes a --vs or --table table; for the method table use -f json")
    if per_seed is not None and study:
        raise ValueError("--per-seed: the method table's; with --vs or --table, --out holds them")
    if study:
        from rollverify.tracking.metric_names import THRESHOLD_GRID_PREFIX
        from rollverify.tracking.run_records import load_report

        grid = (THRESHOLD_GRID_PREFIX,) if thresholds else ()
        found = load_report(targets or [], tracking_uri, prefixes=grid)
        _log(f"{found.kind}: {len(found.runs)} runs in {found.tracking_uri}")
        shown = show_study(
            found.runs, vs, by, table, format, out, plots, frontier, thresholds, margin, only
        )
        for path in shown:
            _log(f"wrote {path}")
        return
    if metrics is not None and plots is None:
        raise ValueError("--metrics: chooses the curves of --plots; add --plots DIR")
    chosen = tuple(name.strip() for name in (metrics or "").split(",") if name.strip())
    show_report(targets or [], tracking_uri, format, plots, per_seed, wide, chosen)


def show_report(
    targets: list[str],
    tracking_uri: str | None,
    format: Format,
    plots_dir: Path | None = None,
    per_seed: Path | None = None,
    wide: bool = False,
    metrics: tuple[str, ...] = (),
) -> None:
    """The report of `targets` (see `report`); compare and sweep end with it. A method table
    is the short summary (rvctl.summary) unless `wide` or a machine format; `metrics`: the
    curves --plots draws (default: PLOT_METRICS)."""
    from rollverify.experiments.report import method_rows, run_groups, short_names, sweep_grid
    from rollverify.experiments.report import sweep_rows as grid_point_rows
    from rollverify.tracking.plots import PLOT_METRICS, plot_gaps, plot_metrics
    from rollverify.tracking.run_records import load_report

    found = load_report(targets, tracking_uri, prefixes=metrics)
    what = ", ".join(found.parent_run_ids) or f"{len(found.runs)} runs"
    _log(f"{found.kind}: {what} in {found.tracking_uri}")
    short = format is Format.table and not wide and found.kind != "sweep"

    if found.kind == "sweep":
        rows = grid_point_rows(found.runs, found.sweep_params)
        names = short_names(found.sweep_params)
        point = len(rows[0]) - len(rows[0].keys() - {"method", "corrections", *names})
        shown = [_mark_few_pairs(row) for row in rows] if format is Format.table else rows
        _print(shown, format, f"sweep over {', '.join(found.sweep_params)}", keys=point)
        if format is Format.table and len(names) == 2 and "method" not in rows[0]:
            for value in ("eval_accuracy_mean", "device_days"):
                grid = sweep_grid(rows, names[0], names[1], value)
                _print(grid, format, f"{TABLE_HEADERS[value]}, {names[0]} x {names[1]}")
    else:
        rows = method_rows(found.runs)
        # method, the choices it ran with, and the settings that tell its rows apart
        keys = 1 + ("corrections" in rows[0]) + ("settings" in rows[0])
        if short:
            _print(summary.summary_rows(rows), format, f"methods ({found.kind})", keys=keys)
        else:
            shown = [_mark_few_pairs(row) for row in rows] if format is Format.table else rows
            _print(shown, format, f"methods ({found.kind})", keys=keys)

    _say_duplicates(rows)
    if found.kind != "sweep":
        _say_unpaired(found.runs)
    if format is Format.table:
        _log(summary.LEGEND if short else LEGEND)
    if per_seed is not None:
        _write_seed_rows(found, per_seed)
        _log(f"wrote {per_seed}")
    if plots_dir is not None:
        chosen = {name: PLOT_METRICS.get(name, name) for name in metrics} or PLOT_METRICS
        missing = [name for name in chosen if not any(name in r.history for r in found.runs)]
        if metrics and missing:
            _log(f"note: no run here logged {', '.join(missing)} (docs/metrics.md names them)")
        for path in plot_metrics(run_groups(found), plots_dir, chosen):
            _log(f"wrote {path}")
        knobs = [n for n in names if n != "method"] if found.kind == "sweep" else []
        over_methods = len(knobs) == 1 and "method" in rows[0]  # and one knob: a gap plot
        if over_methods and (path := plot_gaps(rows, knobs[0], plots_dir)) is not None:
            _log(f"wrote {path}")


def _write_seed_rows(found: Any, path: Path) -> None:
    """One row per finished run (report.seed_rows), as JSON or CSV by the file's suffix."""
    import csv
    import io
    import json

    from rollverify.experiments.seed_rows import seed_rows
    from rollverify.infra.atomic_write import atomic_write_text

    rows = seed_rows(found)
    if path.suffix == ".json":
        text = json.dumps(rows, indent=1) + "\n"
    else:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else ["run_id"])
        writer.writeheader()
        writer.writerows(rows)
        text = out.getvalue()
    atomic_write_text(path, text)


def _say_duplicates(rows: list[dict[str, Any]]) -> None:
    """A seed finished twice in a row's runs counts once; the report says so, in every format
    (a resumed sweep of older code could train a grid point again)."""
    repeated = sum(row.get("duplicates") or 0 for row in rows)
    if repeated:
        _log(
            f"note: {repeated} finished run(s) repeat a seed their row already counts; each "
            "seed counts once (its first run), the others are left out (column duplicates)"
        )


def _say_unpaired(runs: list) -> None:
    """Where a method's seeds have no grpo run, its Δ and cost* columns are empty: say which
    runs would fill them (rvctl report --vs and --frontier stop there instead)."""
    from rollverify.experiments.vs_baseline import METHOD, missing_twins

    for label, seeds, _, command in missing_twins(runs, {METHOD: "grpo"}):
        listed = ", ".join(map(str, seeds))
        _log(f"note: {label}: no grpo run of seed(s) {listed} among these runs; make: {command}")


def _mark_few_pairs(row: dict[str, Any]) -> dict[str, Any]:
    """A difference shown without its interval says why (json/csv/md: null, and `pairs`)."""
    from rollverify.experiments.report import PAIRED, paired_columns

    marked = dict(row)
    for mean, ci95, *_ in map(paired_columns, PAIRED):
        if row.get(mean) is not None and row[ci95] is None:
            marked[ci95] = FEW_PAIRS
    return marked


def _print(rows: list[dict[str, Any]], format: Format, title: str, keys: int = 1) -> None:
    print_split(rows, format, title, TABLE_HEADERS, keys)


def _log(line: str) -> None:
    """One unwrapped line to stderr (paths may hold [brackets]: no markup)."""
    stderr.print(line, soft_wrap=True, markup=False, highlight=False)
