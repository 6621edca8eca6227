"""`rvctl compare --resume`: a comparison killed mid-way goes on in its folder and parent run;
finished pairs are kept as they are, a stopped one resumes from its checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rollverify.config import ConfigError, load_config
from rollverify.experiments.compare import Child, child_folder, compare
from tests.laptop import python_without_vllm
from tests.runs import tiny_file
from tests.test_cli import rvctl

PARTIAL = Child("partial", 0)


@pytest.mark.slow  # two compare commands and one call of 2 x 2 steps, ~30 s
def test_a_killed_comparison_goes_on_where_it_stopped(tmp_path):
    config = tiny_file(tmp_path / "c.yaml", **{"train.steps": 2, "train.checkpoint_every": 1})
    runs = tmp_path / "runs"
    command = ["compare", "grpo", "partial", "-c", str(config), "--output", str(runs)]
    killed = rvctl(*command, env=os.environ | {"ROLLVERIFY_KILL_AT": "train:2"})
    assert killed.returncode == -9  # grpo's step 2, SIGKILL: no cleanup at all
    (folder,) = runs.glob("compare-*")
    grpo = child_folder(folder, Child("grpo", 0))
    assert grpo is not None and not (grpo / "summary.json").exists()
    assert child_folder(folder, PARTIAL) is None

    # A laptop's install: no vLLM at all. The hf engine's runs do not need it.
    python = python_without_vllm(tmp_path / "laptop")
    probe = "import importlib.util as u, sys; sys.exit(u.find_spec('vllm') is not None)"
    assert subprocess.run([python, "-c", probe]).returncode == 0, "vLLM is still seen"
    resumed = subprocess.run(
        [python, "-m", "rvctl.app", *command, "--resume", "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(row["method"] for row in json.loads(resumed.stdout)) == ["grpo", "partial"]
    assert child_folder(folder, Child("grpo", 0)) == grpo  # its own folder, continued
    record = json.loads((grpo / "mlflow.json").read_text())
    client = MlflowClient(record["tracking_uri"])
    run = client.get_run(record["run_id"])
    assert run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "reward_mean")]
    assert sorted(steps) == [1, 2]  # each step once
    parent = json.loads((folder / "parent.json").read_text())
    children = client.search_runs(
        [run.info.experiment_id], f"tags.mlflow.parentRunId = '{parent['run_id']}'"
    )
    assert len(children) == 2  # no second grpo run
    assert client.get_run(parent["run_id"]).info.status == "FINISHED"

    summaries = {p: p.stat().st_mtime_ns for p in folder.glob("*/summary.json")}
    assert len(summaries) == 2
    again = compare(load_config(config), ["grpo", "partial"], resume_folder=folder)
    assert [s.run_dir for s in again.summaries] == [str(grpo), str(child_folder(folder, PARTIAL))]
    assert {p: p.stat().st_mtime_ns for p in folder.glob("*/summary.json")} == summaries
    # finished again, its parent's report is the comparison's, once (not appended to)
    stored = Path(client.download_artifacts(parent["run_id"], "report.json", str(tmp_path)))
    table = json.loads(stored.read_text())
    assert [row[table["columns"].index("method")] for row in table["data"]] == ["grpo", "partial"]
    longer = load_config(config, {"train.steps": 3})  # not the comparison it was
    with pytest.raises(ConfigError, match=r"-s0-.*: train.steps: it trained 2 steps, 3 now"):
        compare(longer, ["grpo", "partial"], resume_folder=folder)


def test_resume_of_another_comparison_is_refused(tmp_path):
    folder = tmp_path / "compare-x"
    folder.mkdir()
    record = {"kind": "compare", "run_id": "r", "tracking_uri": "sqlite:///x", "methods": "grpo"}
    (folder / "parent.json").write_text(json.dumps(record | {"seeds": "1"}))
    result = rvctl("compare", "grpo", "partial", "--compare-dir", str(folder))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        "error: --resume: compare-x compares methods grpo, not grpo,partial; run it with the "
        "same methods and --seeds, or leave --resume out"
    )
    missing = rvctl("compare", "grpo", "--resume", "--output", str(tmp_path / "none"))
    assert missing.returncode == 2
    assert missing.stderr.strip().startswith("error: --resume: no compare-* folder in ")
