"""rvctl report takes any folder rvctl writes: a run folder, a compare or sweep folder, the
--output folder of `rvctl train` (its store and run folders) or one with only a store, several
at once and in several stores; and a comparison it cannot make (no baseline run of a seed)
names the runs to make and the command that makes them, rather than print a row of dashes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rollverify.tracking.run_records import load_report
from tests.cli import run_rvctl
from tests.report_store import Store


def output_folder(root: Path, template: Path, runs: list[tuple[str, int]]) -> tuple[Store, Path]:
    """A `train --output` folder: its store and, per run, a run folder naming it (mlflow.json,
    as rollverify/training/run_tracking.py writes it) with its config.yaml."""
    root.mkdir(parents=True)
    store = Store(root, template)
    for method, seed in runs:
        logged = store.run(method, seed, params={"train.seed": str(seed), "output": str(root)})
        folder = root / f"{method}-s{seed}-{logged.run_id[:8]}"
        folder.mkdir()
        record = {"run_id": logged.run_id, "tracking_uri": store.uri}
        (folder / "mlflow.json").write_text(json.dumps(record))
        (folder / "config.yaml").write_text(f"train:\n  method: {method}\n  seed: {seed}\n")
        store.client.set_tag(logged.run_id, "run_dir", str(folder))
    return store, root


def test_a_train_output_folder_and_its_run_folders_are_reports(tmp_path, empty_store):
    store, root = output_folder(tmp_path / "runs", empty_store, [("rollverify", 0), ("grpo", 0)])
    store.run("partial", 0)  # in the store, its folder elsewhere (a tracking.uri shared)
    whole = load_report([str(root)])
    assert sorted(r.method for r in whole.runs) == ["grpo", "rollverify"]  # the folder's runs
    assert whole.tracking_uri == store.uri
    (one,) = [f for f in root.iterdir() if f.name.startswith("rollverify")]
    assert [r.method for r in load_report([str(one)]).runs] == ["rollverify"]
    for record in one.parent.glob("*/mlflow.json"):
        record.unlink()  # a folder with its store only: every training run in it
    assert sorted(r.method for r in load_report([str(root)]).runs) == [
        "grpo",
        "partial",
        "rollverify",
    ]


def test_folders_in_two_stores_are_read_together(tmp_path, empty_store):
    output_folder(tmp_path / "a", empty_store, [("grpo", 0), ("grpo", 1)])
    output_folder(tmp_path / "b", empty_store, [("rollverify", 0)])
    found = load_report([str(tmp_path / "a"), str(tmp_path / "b")])
    assert sorted((r.method, r.seed) for r in found.runs) == [
        ("grpo", 0),
        ("grpo", 1),
        ("rollverify", 0),
    ]
    assert found.tracking_uri.count("sqlite:///") == 2


def test_a_frontier_without_its_baseline_names_the_runs_to_make(
    tmp_path, empty_store, monkeypatch, capsys
):
    _, root = output_folder(tmp_path / "runs", empty_store, [("rollverify", 0), ("rollverify", 1)])
    monkeypatch.chdir(tmp_path)
    for study in (["--frontier"], ["--vs", "grpo"]):
        result = run_rvctl(["report", "runs", *study], monkeypatch, capsys)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        (line,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert line.startswith("error: rollverify: seeds 0, 1 have no grpo run to pair with")
        command = line.split("make them: ", 1)[1]
        assert re.fullmatch(
            r"rvctl compare grpo --seeds 2 -c \S+/rollverify-s0-\w+/config\.yaml "
            rf"--set train\.seed=0 --output {re.escape(str(root))}",
            command,
        ), command
    # only the baseline's runs: nothing to compare
    output_folder(tmp_path / "grpo-only", empty_store, [("grpo", 0)])
    result = run_rvctl(["report", "grpo-only", "--frontier"], monkeypatch, capsys)
    assert result.returncode == 2 and "every run here is the baseline's" in result.stderr


def test_under_three_pairs_no_interval_and_no_pareto_mark_is_claimed(
    tmp_path, empty_store, monkeypatch, capsys
):
    runs = [("grpo", 0), ("rollverify", 0), ("rollverify", 1)]  # seed 1 has no grpo run
    output_folder(tmp_path / "runs", empty_store, runs)
    monkeypatch.chdir(tmp_path)
    result = run_rvctl(
        ["report", "runs", "--frontier", "-f", "md", "--plots", "plots"], monkeypatch, capsys
    )
    assert result.returncode == 0, result.stderr
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("| rollverify")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "2 (1)"  # two seeds, one pair
    assert all(cell.endswith("(n<3)") for cell in cells[2:5]) and cells[5] == "n<3"
    assert "seed 1 has no grpo run to pair with" in result.stderr  # a note: one pair exists
    assert (tmp_path / "plots" / "frontier.png").is_file()
