"""Each group of runs against a baseline of the user's choosing, paired by seed: what
`rvctl report --vs KEY=VALUE[,KEY=VALUE] [--by KEY[,KEY]]` prints (docs/results.md: "what each
correction recovers" against partial, "vs the same method at dt 2"), where the method table is
always against grpo.

`vs`: a run's baseline is the run of its seed with those values and, where `train.method` is
not among the keys, its own method; `by` keeps those keys' values too (each eta's runs against
grpo's at that eta). Groups are the runs of one method with the same values of the vs and by
keys and of any other config key whose values differ among the runs given (a threshold set with
--set in one sweep and left at its default in another). Where the baseline's runs themselves
differ in such a key, a group's baseline is the one with the group's value (grpo at the group's
learning rate); where they agree, theirs. A group that is its own baseline gets no row. Per
group: AUC (the primary figure) and final accuracy with their paired difference to the
baseline, 95% interval and the smallest difference its seeds could detect at 80% power. A
seed with more than one finished run counts its first, as the method table does.
"""

from __future__ import annotations

from rollverify.experiments.cells import pm
from rollverify.experiments.margin import margin_cell, non_inferiority
from rollverify.experiments.run_figures import (
    counted,
    eval_area,
    mean_and_ci,
    paired_by_seed,
    paired_diffs,
    sort_key,
)
from rollverify.tracking import metric_names as m
from rollverify.tracking.run_records import RunRecord

METHOD = "train.method"
SEED = "train.seed"
# where a run writes and whom it asks, not what it trains: never a setting that tells groups apart
WHERE = ("output", "tracking.uri", "vllm.ray_address")
FIGURES = {"auc": eval_area, "accuracy": lambda r: r.last(m.EVAL_ACCURACY)}


def parse_vs(text: str) -> dict[str, str]:
    """'train.method=partial,verify.dt=2' -> {'train.method': 'partial', 'verify.dt': '2'}; a
    method's name alone stands for train.method (--vs grpo, --vs partial,verify.dt=2)."""
    from rollverify.core.methods import METHODS

    pairs = [
        [METHOD, part] if part in METHODS else part.split("=", 1)
        for part in text.split(",")
        if part
    ]
    if not pairs or any(len(pair) != 2 or not all(pair) for pair in pairs):
        raise ValueError(
            f"--vs: {text!r} is not METHOD or KEY=VALUE[,KEY=VALUE] (e.g. grpo, verify.dt=2)"
        )
    return dict(pairs)


def parse_by(text: str) -> tuple[str, ...]:
    """'rollout.eta,verify.ds' -> ('rollout.eta', 'verify.ds')."""
    return tuple(key for key in text.split(",") if key)


def paired_groups(
    runs: list[RunRecord], vs: dict[str, str], by: tuple[str, ...] = ()
) -> list[tuple[str, dict, dict, list[RunRecord], dict[int, RunRecord]]]:
    """Each group but the baseline's own: (method, its values of the keys, the baseline's
    values, its counted runs, the baseline's run by seed); methods in order of first
    appearance, values ascending."""
    keys = [k for k in vs if k != METHOD] + [k for k in by if k not in vs]
    settings = setting_keys(runs, keys)
    groups: dict[tuple, list[RunRecord]] = {}
    for run in runs:
        key = (run.method, *(value(run, k) for k in keys + settings))
        groups.setdefault(key, []).append(run)
    out = []
    for (method, *values), runs_of_group in groups.items():
        every = dict(zip(keys + settings, values, strict=True))
        wanted = {METHOD: method} | {k: every[k] for k in by} | vs
        # where the baseline's own runs differ in a setting, its twin is the one like this
        # group (grpo at this learning rate, at this eta); where they agree, it is theirs
        like = setting_keys([r for r in runs if matches(r, wanted)], list(wanted))
        wanted |= {k: every[k] for k in like}
        group = counted(runs_of_group)
        if not group or matches(group[0], wanted):
            continue  # the baseline itself
        # a setting is named where it tells this method's groups apart (partial has no ds)
        own = setting_keys([r for r in runs if r.method == method], keys)
        named = {k: v for k, v in every.items() if k in keys or k in own}
        out.append((method, named, wanted, group, baseline_runs(runs, wanted)))
    methods = list(dict.fromkeys(method for method, *_ in out))
    return sorted(out, key=lambda g: (methods.index(g[0]), *map(sort_key, g[1].values())))


def setting_keys(runs: list[RunRecord], grouped: list[str]) -> list[str]:
    """The config keys whose values differ among `runs`, the seed, the method and the keys
    already grouped by aside: what tells two groups of one method apart where a study set it
    with --set rather than sweeping it (rollverify at ds=auto beside rollverify at ds=0.01)."""
    names = sorted({k for run in runs for k in run.params} - {METHOD, SEED, *WHERE, *grouped})
    return [k for k in names if len({_canonical(value(r, k)) for r in runs}) > 1]


def _canonical(text: str | None) -> float | str | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return text


def rows(
    runs: list[RunRecord],
    vs: dict[str, str],
    by: tuple[str, ...] = (),
    margin: float | None = None,
) -> list[dict]:
    out = []
    for method, values, wanted, group, base in paired_groups(runs, vs, by):
        row: dict = {"method": method, "values": values}
        row["seeds"] = len(group)
        row["baseline"] = ", ".join(f"{k}={v}" for k, v in wanted.items())
        for name, figure in FIGURES.items():
            row[name], row[f"{name}_ci95"] = mean_and_ci(group, figure)
            row |= paired_columns(name, group, base, margin)
        row["paired_seeds"] = sum(r.seed in base for r in group)
        out.append(row)
    return out


def missing_twins(runs: list[RunRecord], vs: dict[str, str], by: tuple[str, ...] = ()) -> list:
    """Each group with seeds that have no baseline run to pair with: (its label, those seeds,
    how many of its seeds do pair, the command that trains the missing baseline runs)."""
    out = []
    for method, values, wanted, group, base in paired_groups(runs, vs, by):
        seeds = sorted(r.seed for r in group if r.seed not in base and r.seed is not None)
        if seeds:
            label = ", ".join([method, *(f"{k}={v}" for k, v in values.items())])
            paired = len(group) - len(seeds)
            out.append((label, seeds, paired, twin_command(wanted, seeds, group[0])))
    return out


def twin_command(wanted: dict[str, str], seeds: list[int], like: RunRecord) -> str:
    """`rvctl compare` of the baseline's method at the baseline's values, on `like`'s config
    (its run folder's config.yaml), for `seeds` (consecutive: one command; else the first)."""
    command = ["rvctl", "compare", wanted[METHOD]]
    consecutive = seeds == list(range(seeds[0], seeds[0] + len(seeds)))
    command += ["--seeds", str(len(seeds) if consecutive else 1)]
    if like.run_dir:
        command += ["-c", f"{like.run_dir}/config.yaml"]
    sets = {k: v for k, v in wanted.items() if k != METHOD} | {SEED: str(seeds[0])}
    command += [part for key, v in sets.items() for part in ("--set", f"{key}={v}")]
    if like.params.get("output"):
        command += ["--output", like.params["output"]]
    shown = " ".join(command)
    return shown if consecutive else f"{shown} (and likewise for seeds {seeds[1:]})"


def paired_columns(
    name: str, group: list[RunRecord], base: dict[int, RunRecord], margin: float | None = None
) -> dict:
    """FIGURES[name]'s paired difference to the baseline: NAME_vs_base, its 95% half-width
    (_ci95) and the smallest difference the pairs detect at 80% power (_mde80); with a
    `margin`, whether it is within it (NAME_within_margin: margin.py's non_inferiority)."""
    paired = paired_by_seed(group, base, FIGURES[name])
    columns = (f"{name}_vs_base", f"{name}_vs_base_ci95", f"{name}_vs_base_mde80")
    out = dict(zip(columns, paired, strict=True))
    if margin is not None:
        diffs = paired_diffs(group, base, FIGURES[name])
        out[f"{name}_within_margin"] = non_inferiority(diffs, margin)
    return out


def value(run: RunRecord, key: str) -> str | None:
    return run.method if key == METHOD else run.params.get(key)


def same(a: str | None, b: str | None) -> bool:
    """Config values as MLflow stores them: '2' and '2.0' are one value."""
    if a is None or b is None:
        return a is b  # a key neither run has is one value
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


def baseline_runs(runs: list[RunRecord], wanted: dict[str, str]) -> dict[int, RunRecord]:
    """The runs with `wanted`'s values, by seed (the first finished run of each, as
    `rvctl report` counts them)."""
    return {r.seed: r for r in counted(r for r in runs if matches(r, wanted))}


def matches(run: RunRecord, wanted: dict[str, str]) -> bool:
    return all(same(value(run, k), v) for k, v in wanted.items())


def markdown(table: list[dict]) -> list[dict[str, str]]:
    """docs/results.md's table: one row of formatted cells per row of `table` (a setting that
    another method's rows name and this one's do not: "-")."""
    named = list(dict.fromkeys(key for r in table for key in r["values"]))
    return [
        {"method": r["method"]}
        | {key: r["values"].get(key, "-") for key in named}
        | {
            "seeds (paired)": f"{r['seeds']} ({r['paired_seeds']})",
            "baseline": r["baseline"],
            "AUC (± 95%)": pm(r, "auc"),
            "Δ AUC vs baseline (± 95%; detectable)": pm(r, "auc_vs_base"),
            "final accuracy (± 95%)": pm(r, "accuracy", 3),
            "Δ final vs baseline (± 95%; detectable)": pm(r, "accuracy_vs_base", 3),
        }
        | margin_cells(r)
        for r in table
    ]


def margin_cells(row: dict) -> dict[str, str]:
    """A row's non-inferiority cells, where a --margin was asked for (margin.py)."""
    return {
        f"within margin ({name})": margin_cell(row[f"{name}_within_margin"])
        for name in ("auc", "accuracy")
        if f"{name}_within_margin" in row
    }
