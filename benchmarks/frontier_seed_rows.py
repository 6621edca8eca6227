"""The cost-accuracy frontier of committed per-seed rows, for studies whose MLflow store is not
kept (this machine's resets lose it): `rvctl report --frontier`'s points, from the rows
`rvctl report --per-seed FILE` wrote beside each table (docs/results/stale/*_seeds.csv,
benchmarks/results/*_seeds.json).

    .venv/bin/python benchmarks/frontier_seed_rows.py docs/results/stale/*_seeds.csv \
        [--runs SWEEP_DIR... [--tracking-uri URI]] [--vs grpo] [--only KEY=VALUE] \
        [--out F.json] [--plots DIR [--figure-floor -0.1]] [-f md|json]

A row is one run (rows of one run_id in several files count once). Its group label
("ds=0.05, dt=2.0, method=rollverify") gives its settings; the stale study's files label a
synchronous run eta=1 (they predate the labels that leave it out) and every other eta an
asynchronous one. Each run becomes a stand-in record that carries exactly the two figures the
frontier reads besides the cost, its AUC and its final accuracy: a three-point curve (final,
2 AUC - final, final), whose normalised area is the AUC and whose last value is the final
accuracy, and its modeled GPU-days. The points, pairing and intervals are then
rollverify/experiments/frontier.py's, unchanged. `--runs` adds stored runs (a sweep's folders)
beside them; pairing those with a committed baseline row assumes that a rerun of that baseline
repeats it, which the caller checks (benchmarks/frontier_study.sh's grpo_check part).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

from rollverify.experiments import frontier
from rollverify.experiments.vs_baseline import METHOD, parse_vs
from rollverify.tracking.run_records import RunRecord, load_report

DOTTED = {  # a group label's short names -> the config keys they stand for
    "ds": "verify.ds",
    "dt": "verify.dt",
    "eta": "rollout.eta",
    "max_staleness": "rollout.max_staleness",
    "batch_order": "rollout.batch_order",
    "learning_rate": "train.learning_rate",
    "switch_threshold": "verify.switch_threshold",
}


def read_rows(path: Path) -> list[dict]:
    if path.suffix == ".json":
        return json.loads(path.read_text())
    with path.open() as handle:
        return list(csv.DictReader(handle))


DEFAULTS = {  # experiments/stale.yaml's, where a file's label leaves a setting out
    "verify.ds": "0.01",
    "verify.dt": "2.0",
    "rollout.batch_order": "complete",
    "rollout.max_staleness": "None",
    "train.learning_rate": "0.0005",
}


def settings(group: str) -> dict[str, str]:
    """'ds=0.05, dt=2.0, method=rollverify' -> {'verify.ds': '0.05', 'verify.dt': '2.0', ...},
    the settings a label leaves out at their defaults."""
    pairs = [part.split("=", 1) for part in group.split(", ") if "=" in part]
    found = DEFAULTS | {DOTTED.get(k, k): v for k, v in pairs if k != "method"}
    found.setdefault("rollout.mode", "sync")
    eta = found.get("rollout.eta")
    if eta is not None:  # the stale study's files: eta=1 is a synchronous run
        found["rollout.mode"] = "sync" if eta == "1" else "async"
        if eta == "1":
            del found["rollout.eta"]
    return found


def record(row: dict, template: dict[str, str] | None = None) -> RunRecord | None:
    auc, final, days = (row.get(k) for k in ("eval_auc", "eval_accuracy", "modeled_gpu_days"))
    if auc in (None, "") or final in (None, "") or days in (None, ""):
        return None
    auc, final = float(auc), float(final)
    params = dict(template or {}) | {"train.method": row["method"], "train.seed": str(row["seed"])}
    params |= settings(row.get("group", ""))
    history = {
        "eval_accuracy": {0: final, 1: 2 * auc - final, 2: final},
        "modeled_gpu_days": {2: float(days)},
    }
    return RunRecord(row["run_id"], row["method"], int(row["seed"]), "FINISHED", 0, params, history)


def records(
    paths: list[Path], only: dict[str, str], template: dict[str, str] | None = None
) -> list[RunRecord]:
    """The stand-ins of every file's rows. A file given as PATH:KEY=VALUE[,KEY=VALUE] adds
    those settings to each of its rows' (a part whose label leaves them out: auto_seeds.csv's
    runs ran at ds=auto, which their label does not say)."""
    seen, out = set(), []
    for given in paths:
        path, _, extra = str(given).partition(":")
        added = dict(part.split("=", 1) for part in extra.split(",") if part)
        for row in read_rows(Path(path)):
            if added:
                labels = [row.get("group", ""), *(f"{k}={v}" for k, v in added.items())]
                row = row | {"group": ", ".join(filter(None, labels))}
            run = record(row, template)
            if run is None or run.run_id in seen:
                continue
            if all(run.params.get(k) == v for k, v in only.items()):
                seen.add(run.run_id)
                out.append(run)
    return out


def template_of(stored: list[RunRecord], baseline: str) -> dict[str, str] | None:
    """The config the stand-ins take: a stored run's (the same config file's; a baseline run
    where one is stored, else the first), so that they differ from the stored runs only in what
    their labels say, whatever the baseline (--vs opsm beside stored grpo and rollverify runs)."""
    ours = [r for r in stored if r.method == baseline] or stored
    return dict(ours[0].params) if ours else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--vs", default="grpo")
    parser.add_argument("--only", action="append", default=[], help="KEY=VALUE: these runs")
    parser.add_argument("--runs", nargs="*", default=[], help="also these sweep folders' runs")
    parser.add_argument("--tracking-uri", help="their store (default: their parent.json's)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plots", type=Path)
    parser.add_argument("-f", "--format", choices=("md", "json"), default="md")
    parser.add_argument("--margin", type=float, help="mark each point within M (margin.py)")
    parser.add_argument("--show", help="the figure shows the points whose label matches this")
    parser.add_argument(
        "--figure-floor",
        type=float,
        help="the figure leaves out points below this ΔAUC (the table keeps them)",
    )
    args = parser.parse_args()
    only = dict(part.split("=", 1) for part in args.only)
    vs = parse_vs(args.vs)
    stored = load_report(args.runs, args.tracking_uri).runs if args.runs else []
    template = template_of(stored, vs[METHOD])
    points = frontier.frontier_rows(
        records(args.files, only, template) + stored, vs, margin=args.margin
    )
    if args.format == "json":
        print(json.dumps(points, indent=1))
    else:
        cells = frontier.markdown(points)
        print("| " + " | ".join(cells[0]) + " |\n|" + "---|" * len(cells[0]))
        for row in cells:
            print("| " + " | ".join(row.values()) + " |")
    if args.out:
        args.out.write_text(json.dumps({"vs": args.vs, "points": points}, indent=1) + "\n")
    if args.plots:
        floor = args.figure_floor
        shown = [p for p in points if floor is None or (p["auc_vs_base"] or floor) >= floor]
        shown = [p for p in shown if args.show is None or re.search(args.show, p["point"])]
        print(frontier.plot(shown, args.plots, margin=args.margin), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
