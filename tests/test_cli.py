"""The rvctl command line: real subprocesses, as a user runs it."""

import json
import os
import subprocess
import sys

from rollverify.core.methods import METHODS
from tests.cli import run_rvctl

PYTHON = sys.executable


def rvctl(*args, **kwargs):
    return subprocess.run(
        [PYTHON, "-m", "rvctl.app", *args], capture_output=True, text=True, **kwargs
    )


def test_help_lists_the_commands_that_exist():
    result = rvctl("--help")
    assert result.returncode == 0
    assert "data" in result.stdout


COMMANDS = ["train", "resume", "methods", "compare", "sweep", "report", "simulate"]
COMMANDS += ["calibrate", "export", "ui", "data", "data check", "config", "config show"]
COMMANDS += ["preconditions"]
COMMANDS += ["config explain"]


def test_every_help_reads_whole_at_80_columns_and_completion_is_on(monkeypatch, capsys):
    """No line wider than 80 and nothing cut short, for rvctl and each of its commands; the
    shell completion options are there."""
    monkeypatch.setenv("COLUMNS", "80")
    for command in ["", *COMMANDS]:
        result = run_rvctl([*command.split(), "--help"], monkeypatch, capsys)
        assert result.returncode == 0, (command, result.stderr)
        for line in result.stdout.splitlines():
            # (click ends a cut short help with "...", rich's tables cut with "…")
            cut = (line.endswith("...") and not line.startswith("Usage:")) or "…" in line
            assert len(line) <= 80 and not cut, (command, line)
        if not command:
            assert "--install-completion" in result.stdout


def test_data_check_as_json(tmp_path):
    records = [
        {"problem": "1+1?", "answer": "2"},
        {"problem": "half?", "answer": "\\frac{1}{2}"},
        {"problem": "no answer", "answer": None},
    ]
    (tmp_path / "mini.json").write_text(json.dumps(records))
    result = rvctl("data", "check", str(tmp_path), "--format", "json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["file"] == "mini" and row["records"] == 3 and row["skipped"] == 1
    assert row["reference_correct"] == row["perturbed_rejected"] == row["checked"] == 2


def test_bad_input_is_one_line_exit_2_no_traceback(tmp_path):
    result = rvctl("data", "check", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert (
        result.stderr.splitlines()[0]
        == f"error: {tmp_path / 'missing'}: no *.json math files found"
    )
    assert result.stdout == ""


def test_a_bad_option_value_is_a_usage_error():
    result = rvctl("data", "check", "--limit", "0")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--limit" in result.stderr


def test_rvctl_methods_reads_at_80_columns_and_its_formats_give_every_field():
    """At 80 columns every method's name is whole, on the line that starts its row, and no
    line is wider; json (csv, md) still gives every field."""
    result = rvctl("methods", env=os.environ | {"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    first_words = {line.split()[0] for line in lines if line.strip()}
    assert set(METHODS) <= first_words, set(METHODS) - first_words
    rows = json.loads(rvctl("methods", "--format", "json").stdout)
    assert [row["method"] for row in rows] == list(METHODS)
    fields = {"partial", "verify", "token_stage", "switching", "filter", "denominator"}
    assert all(fields | {"correction", "summary"} <= set(row) for row in rows)


def test_the_live_figures_show_a_small_ops_at_its_size_as_the_tables_do():
    from rvctl.progress import figures

    shown = figures({"ops_mean": 9.738e-05, "acceptance_rate": 0.8207, "reward_mean": 0.5})
    assert shown == "reward 0.5  OPS 9.738e-05  accept 0.8207"
