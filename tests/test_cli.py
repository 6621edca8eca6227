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
COMMANDS += ["preconditions", "plan"]
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


def test_version_names_the_commit_and_the_stack_a_bug_report_needs():
    result = rvctl("--version")
    assert result.returncode == 0, result.stderr
    first, *rest = result.stdout.splitlines()
    from rollverify import __version__

    assert first.startswith(f"rollverify {__version__} (commit ")
    named = {line.split()[0]: line.split(maxsplit=1)[1] for line in rest}
    assert set(named) >= {"torch", "transformers", "trl", "vllm", "mlflow", "ray"}
    import torch

    assert named["torch"] == torch.__version__


def test_train_help_shows_the_config_defaults_its_options_stand_for(monkeypatch, capsys):
    from rollverify.config import load_config

    built_in = load_config(None)
    shown = " ".join(run_rvctl(["train", "--help"], monkeypatch, capsys).stdout.split())
    assert f"(train.steps: {built_in.train.steps})" in shown
    assert f"(train.method: {built_in.train.method})" in shown
    assert f"(rollout.engine: {built_in.rollout.engine})" in shown


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


def test_a_step_line_carries_tokens_per_second_and_the_time_left(monkeypatch, capsys):
    from rvctl import progress

    clock = iter([100.0, 110.0, 112.0, 116.0])  # start; step 0 at 110; steps 1, 2: 2 s, 4 s
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    lines = progress.StepLines("grpo", 10)
    lines(0, {"eval_accuracy": 0.5})
    lines(1, {"reward_mean": 0.5, "trl/loss": 0.012, "trl/grad_norm": 0.41,
              "tokens_generated": 5000.0})  # fmt: skip
    lines(2, {"tokens_generated": 2000.0})
    shown = capsys.readouterr().err.splitlines()
    assert (
        shown[1]
        == "grpo step 1/10  reward 0.5  loss 0.012  grad 0.41  2,500 tok/s  2.0 s  left 0m18s"
    )
    assert shown[2].endswith("500 tok/s  4.0 s  left 0m24s")  # 3 s a step so far, 8 to go


def test_while_a_command_works_stdout_keeps_only_its_result(capsys):
    """What a library prints to stdout from a thread of its own while a run works (Ray's
    driver prints a lost node's raylet dump there) goes to stderr: `-f json` leaves one
    document on stdout (a sweep on a cluster printed the dump before its table)."""
    import threading

    from rvctl.output import stdout_for_results

    with stdout_for_results():
        thread = threading.Thread(target=lambda: print("(raylet) Raylet is terminated."))
        thread.start()
        thread.join()
    print(json.dumps({"ds": 0.01}))
    out, err = capsys.readouterr()
    assert json.loads(out) == {"ds": 0.01}
    assert "(raylet) Raylet is terminated." in err


def test_the_cli_starts_without_torch():
    """`rvctl --help`, `--version`, a config error: nothing a command has not asked for is
    imported, torch least of all (a second on 2 cores). The config's verify section reads the
    threshold grid's points from rollverify/core: those modules import torch where they
    compute, not at import (it had made every start 1.4 s, not 0.2)."""
    heavy = "('torch', 'trl', 'mlflow')"
    code = f"import sys, rvctl.app; print(sorted(m for m in {heavy} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
