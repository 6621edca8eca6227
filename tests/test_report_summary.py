"""The summary table `rvctl report` and `rvctl compare` end with (rvctl/summary.py): what
decides first, in one table under 80 columns, its cells the json rows' own figures."""

import json

from typer.testing import CliRunner

from rvctl.app import app


def cells_by_method(stdout: str) -> tuple[list[str], dict[str, list[str]]]:
    """The summary's header and each row's cells, by method (a rich table's text)."""
    lines = [line for line in stdout.splitlines() if line.startswith(("┃", "│"))]
    split = [[cell.strip() for cell in line.strip("┃│").split("│" if "│" in line else "┃")]
             for line in lines]  # fmt: skip
    return split[0], {row[0]: row for row in split[1:]}


def test_the_summary_leads_with_what_decides_in_80_columns(store):
    runner = CliRunner()
    target = [store.compare, "--tracking-uri", store.uri]
    result = runner.invoke(app, ["report", *target])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in result.stdout
    assert sum("methods (compare" in line for line in lines) == 1  # one table, not split
    header, rows = cells_by_method(result.stdout)
    assert header == ["method", "seeds", "AUC", "ΔAUC", "acc", "cost*", "switch@"]
    full = {row["method"]: row for row in json.loads(
        runner.invoke(app, ["report", *target, "--format", "json"]).stdout)}  # fmt: skip
    cell = dict(zip(header, rows["rollverify"], strict=True))
    ours, grpo = full["rollverify"], full["grpo"]
    assert cell["AUC"] == f"{ours['eval_auc_mean']:.3f}±{ours['eval_auc_ci95']:.3f}"
    assert cell["ΔAUC"] == f"{ours['auc_diff_vs_grpo']:+.3f}±{ours['auc_diff_ci95']:.3f}"
    assert cell["acc"] == f"{ours['eval_accuracy_mean']:.3f}"
    # cost*: the row's modeled GPU-days over grpo's (from the two rows, not the speedup)
    assert cell["cost*"] == f"{ours['modeled_gpu_days'] / grpo['modeled_gpu_days']:.2f}"
    assert float(cell["cost*"]) < 1  # rollverify's runs were logged cheaper than grpo's
    assert cell["switch@"] == "8"  # median of the switches at 7 and 9
    assert cell["seeds"] == "3/4"  # three finished seeds of four runs (one killed)
    partial = dict(zip(header, rows["partial"], strict=True))
    assert partial["ΔAUC"].endswith("(n<3)") and partial["switch@"] == "-"  # one pair
    assert dict(zip(header, rows["grpo"], strict=True))["ΔAUC"] == "-"  # no pair with itself
    assert "--wide" in result.stderr  # the legend says where the rest is


def test_wide_and_the_machine_formats_keep_every_column(store):
    target = ["report", store.compare, "--tracking-uri", store.uri]
    wide = CliRunner().invoke(app, [*target, "--wide"])
    assert wide.exit_code == 0, wide.output
    assert "speedup*" in wide.stdout and "accept-min" in wide.stdout
    assert "speedup*" not in CliRunner().invoke(app, target).stdout
    rows = json.loads(CliRunner().invoke(app, [*target, "--format", "json"]).stdout)
    assert {"modeled_speedup_vs_grpo", "acceptance_window_min", "ops_mean"} <= set(rows[0])
