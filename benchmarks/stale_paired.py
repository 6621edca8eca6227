"""Each group of runs against a baseline of your choosing, paired by seed: the columns that
`rvctl report` (always against grpo) does not give (docs/results.md: "what each correction
recovers" against partial, "vs the same method at dt 2").

    .venv/bin/python benchmarks/stale_paired.py CORRECTIONS_SWEEP GRPO_PARTIAL_SWEEP \
        --vs train.method=partial --tracking-uri sqlite:///... [--md] [--out F.json]
    .venv/bin/python benchmarks/stale_paired.py DT02_SWEEP TABLE3_SWEEP --vs verify.dt=2
    .venv/bin/python benchmarks/stale_paired.py OPSM_DOSE GRPO_DOSES --vs train.method=grpo \
        --by rollout.eta

`--vs KEY=VALUE[,KEY=VALUE]`: a run's baseline is the run of its seed with those values and,
where `train.method` is not among the keys, its own method; `--by KEY[,KEY]` keeps those keys'
values too (each eta's runs against grpo's at that eta). Groups are the runs of one method with
the same values of the --vs and --by keys; a group that is its own baseline gets no row. Per group:
AUC (the primary figure) and final accuracy with their paired difference to the baseline, 95%
interval and the smallest difference 5 seeds could detect at 80% power. A seed with more than
one finished run counts its first, as `rvctl report` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from stale_tables import mean_and_ci, paired_by_seed, pm

from rollverify.experiments.report import _sort_key, counted, eval_area
from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import RunRecord, load_report
from rvctl.output import Format, print_rows

METHOD = "train.method"
FIGURES = {"auc": eval_area, "accuracy": lambda r: r.last(m.EVAL_ACCURACY)}


def parse_vs(text: str) -> dict[str, str]:
    """'train.method=partial,verify.dt=2' -> {'train.method': 'partial', 'verify.dt': '2'}."""
    pairs = [part.split("=", 1) for part in text.split(",") if part]
    if not pairs or any(len(pair) != 2 or not all(pair) for pair in pairs):
        raise ValueError(f"--vs: {text!r} is not KEY=VALUE[,KEY=VALUE] (e.g. verify.dt=2)")
    return dict(pairs)


def _value(run: RunRecord, key: str) -> str | None:
    return run.method if key == METHOD else run.params.get(key)


def _same(a: str | None, b: str | None) -> bool:
    """Config values as MLflow stores them: '2' and '2.0' are one value."""
    try:
        return a is not None and b is not None and float(a) == float(b)
    except ValueError:
        return a == b


def rows(runs: list[RunRecord], vs: dict[str, str], by: tuple[str, ...] = ()) -> list[dict]:
    keys = [k for k in vs if k != METHOD] + [k for k in by if k not in vs]
    groups: dict[tuple, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault((run.method, *(_value(run, k) for k in keys)), []).append(run)
    out = []
    for (method, *values), runs_of_group in groups.items():
        kept = {k: v for k, v in zip(keys, values, strict=True) if k in by}
        wanted = {METHOD: method} | kept | vs
        group = counted(runs_of_group)
        if not group or _matches(group[0], wanted):
            continue  # the baseline itself
        base = _baseline(runs, wanted)
        row: dict = {"method": method, "values": dict(zip(keys, values, strict=True))}
        row["seeds"] = len(group)
        row["baseline"] = ", ".join(f"{k}={v}" for k, v in wanted.items())
        for name, figure in FIGURES.items():
            row[name], row[f"{name}_ci95"] = mean_and_ci(group, figure)
            paired = paired_by_seed(group, base, figure)
            columns = (f"{name}_vs_base", f"{name}_vs_base_ci95", f"{name}_vs_base_mde80")
            row |= dict(zip(columns, paired, strict=True))
        row["paired_seeds"] = sum(r.seed in base for r in group)
        out.append(row)
    methods = list(dict.fromkeys(r["method"] for r in out))  # first seen first, values ascending
    return sorted(
        out, key=lambda r: (methods.index(r["method"]), *map(_sort_key, r["values"].values()))
    )


def _baseline(runs: list[RunRecord], wanted: dict[str, str]) -> dict[int, RunRecord]:
    """The runs with `wanted`'s values, by seed (the first finished run of each, as
    `rvctl report` counts them)."""
    return {r.seed: r for r in counted(r for r in runs if _matches(r, wanted))}


def _matches(run: RunRecord, wanted: dict[str, str]) -> bool:
    return all(_same(_value(run, k), v) for k, v in wanted.items())


def markdown(table: list[dict]) -> list[dict[str, str]]:
    """docs/results.md's table: one row of formatted cells per row of `table`."""
    return [
        {"method": r["method"]}
        | r["values"]
        | {
            "seeds (paired)": f"{r['seeds']} ({r['paired_seeds']})",
            "baseline": r["baseline"],
            "AUC (± 95%)": pm(r, "auc"),
            "Δ AUC vs baseline (± 95%; detectable)": pm(r, "auc_vs_base"),
            "final accuracy (± 95%)": pm(r, "accuracy", 3),
            "Δ final vs baseline (± 95%; detectable)": pm(r, "accuracy_vs_base", 3),
        }
        for r in table
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", help="sweep folders (or run ids)")
    parser.add_argument("--vs", required=True, help="the baseline: KEY=VALUE[,KEY=VALUE]")
    parser.add_argument("--by", default="", help="KEY[,KEY]: the baseline keeps these values")
    parser.add_argument("--tracking-uri")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--md", action="store_true", help="print docs/results.md's table")
    args = parser.parse_args()
    try:
        vs = parse_vs(args.vs)
        by = tuple(key for key in args.by.split(",") if key)
        table = rows(load_report(args.targets, args.tracking_uri).runs, vs, by)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    print_rows(markdown(table), Format.md if args.md else Format.table)
    if args.out:
        args.out.write_text(json.dumps({"vs": args.vs, "rows": table}, indent=1) + "\n")


if __name__ == "__main__":
    main()
