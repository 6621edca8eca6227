"""Wrong inputs at each entry point fail in seconds, in one line each, before anything starts
(rollverify/training/preflight.py check_before_start), and a run that fails inside a comparison is
told as that run's one line. rvctl runs in this process (tests/cli.py)."""

from __future__ import annotations

import shutil
import socket
import sys
import time
from pathlib import Path

import pytest

from rollverify.config import load_config
from rollverify.infra.paths import ASSETS
from rollverify.training.preflight import model_found, output_found, tracking_found
from tests.cli import run_rvctl
from tests.runs import tiny_file

TINY_MODEL = ASSETS / "models" / "tiny-qwen3-chain"


def errors(result) -> list[str]:
    """The error lines (a comparison's live table is on stderr too), each a line of its own."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert all("error: " not in line or line.startswith("error: ") for line in lines), lines
    return [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]


def test_a_sweep_names_each_bad_grid_point_before_ray_starts(tmp_path, monkeypatch, capsys):
    config = tiny_file(tmp_path / "tiny.yaml")
    args = ["sweep", "ds", "dt", "--ds", "0.01,abc", "--dt", "-3,1", "--steps", "1"]
    args += ["--config", str(config), "--output", str(tmp_path / "runs")]
    result = run_rvctl(args, monkeypatch, capsys)
    assert result.returncode == 2
    assert errors(result) == [
        "grid point ds=0.01 dt=-3: verify.dt: must be > 0 (inf allowed) or auto, got -3.0",
        "grid point ds=abc dt=-3: verify.ds: must be a number or auto, got 'abc'",
        "grid point ds=abc dt=-3: verify.dt: must be > 0 (inf allowed) or auto, got -3.0",
        "grid point ds=abc dt=1: verify.ds: must be a number or auto, got 'abc'",
    ]
    assert not (tmp_path / "runs").exists()
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()


def test_sweep_seeds_replace_the_specs_and_zero_is_refused(tmp_path, monkeypatch, capsys):
    from rollverify.experiments.sweep import load_grid

    assert load_grid(["ds", "dt"], {}).seeds == 1  # the shipped sweeps/ds_dt.yaml
    assert load_grid(["ds", "dt"], {"ds": "0.01"}, seeds=3).size == 3 * 4  # 1 ds x 4 dt x 3
    switch = load_grid(["method", "keep_kv"], {"method": "partial", "keep_kv": "false,True"})
    assert switch.values["rollout.keep_kv"] == [False, True]  # booleans, not words
    config = tiny_file(tmp_path / "tiny.yaml")
    args = ["sweep", "ds", "--ds", "0.01", "--seeds", "0", "--config", str(config)]
    result = run_rvctl([*args, "--output", str(tmp_path / "runs")], monkeypatch, capsys)
    assert result.returncode == 2
    assert errors(result) == ["--seeds 0: needs at least 1 seed per grid point"]
    assert not (tmp_path / "runs").exists()


def test_a_model_that_is_not_here_is_named_in_seconds(tmp_path, monkeypatch):
    def problems(path: str) -> list[str]:
        return model_found(load_config(overrides={"model.path": path}))[1]

    for offline in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # either is huggingface_hub's
        monkeypatch.setenv(offline, "1")
        (problem,) = problems("someone/no-such-model")
        assert problem.startswith("model.path: someone/no-such-model is not in the local Huggi")
        assert offline in problem and "hf download someone/no-such-model" in problem
        monkeypatch.delenv(offline)
    # Online, but the hub does not answer (here: nothing listens at its address): one request.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", endpoint)
    started = time.monotonic()
    (problem,) = problems("someone/another-model")
    assert time.monotonic() - started < 10  # transformers retries for ~50 s here
    assert f"the hub ({endpoint}) does not answer" in problem
    # A folder must hold what loading needs.
    partial = tmp_path / "model"
    shutil.copytree(TINY_MODEL, partial)
    (partial / "tokenizer.json").unlink()
    (partial / "tokenizer_config.json").unlink()
    (problem,) = problems(str(partial))
    assert problem == (
        f"model.path: {partial} has no tokenizer; point it to a model folder (save_pretrained "
        "of the model and its tokenizer writes them)"
    )
    assert problems(str(TINY_MODEL)) == []


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("/proc/rvctl", "output: cannot write runs to /proc/rvctl (in /proc: No such file"),
        ("FILE/runs", "output: cannot write runs to FILE/runs (FILE is a file); pick a folder"),
    ],
)
def test_an_output_folder_that_cannot_be_written_is_named(tmp_path, output, expected):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    output, expected = (text.replace("FILE", str(blocked)) for text in (output, expected))
    config = load_config(overrides={"output": str(tmp_path)})
    config.output = output  # (a file in the way is refused when a config loads, too)
    (problem,) = output_found(config)[1]
    assert problem.startswith(expected), problem
    assert list(tmp_path.iterdir()) == [blocked], "the check leaves nothing behind"
    assert output_found(load_config(overrides={"output": str(tmp_path / "new")}))[1] == []


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        (
            "/data/mlruns",
            "tracking.uri: /data/mlruns is a path, MLflow's file store, which MLflow 3",
        ),
        ("sqlite:///NEW/x/m.db", "tracking.uri: no folder NEW/x for the store m.db; make it"),
        ("sqlite:///HERE", "tracking.uri: HERE is a folder; name the database file"),
        ("ftp://host/x", "tracking.uri: unknown scheme 'ftp' in ftp://host/x; use one of"),
        ("http://127.0.0.1:PORT", "tracking.uri: no MLflow server answers at http://127.0.0.1:"),
        ("http://host:abc", "tracking.uri: http://host:abc has no valid port"),
    ],
)
def test_a_tracking_store_that_cannot_work_is_named(tmp_path, uri, expected):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = str(closed.getsockname()[1])
    here = str(tmp_path)
    uri, expected = (
        text.replace("NEW", f"{here}/new").replace("HERE", here).replace("PORT", port)
        for text in (uri, expected)
    )
    config = load_config(overrides={"tracking.uri": uri, "output": here})
    (problem,) = tracking_found(config)[1]
    assert problem.startswith(expected), problem
    assert tracking_found(load_config(overrides={"output": here}))[1] == []
    for fine in ("databricks", f"sqlite+pysqlite:///{here}/m.db", f"sqlite:///{here}/m.db"):
        assert tracking_found(load_config(overrides={"tracking.uri": fine}))[1] == [], fine


@pytest.mark.slow  # a comparison's first run, until its reward fails (~5 s)
def test_a_run_that_fails_inside_a_comparison_is_its_one_line(tmp_path, monkeypatch, capsys):
    reward = tmp_path / "nan_reward.py"
    reward.write_text("def score(response, answer):\n    return float('nan')\n")
    config = tiny_file(tmp_path / "tiny.yaml", **{"task.reward": f"{reward}:score"})
    args = ["compare", "grpo", "partial", "--config", str(config), "--output", str(tmp_path)]
    result = run_rvctl(args, monkeypatch, capsys)
    assert result.returncode == 2  # a reward that returns nan: the user's input
    first, then = errors(result)
    assert first.startswith(f"grpo/s0: task.reward {reward}:score returned nan for the response")
    assert then.startswith("the pairs after it did not run; fix it and go on")
    assert not list(Path(tmp_path).glob("compare-*/partial-*")), "partial never started"


def test_a_launched_world_meets_on_loopback():
    """The node's address, where the ranks find the store they share, is 127.0.0.1 (torch
    would take the host's name, which may resolve to an address the store does not listen
    on: training/distributed/loopback_stores.py binds it to 127.0.0.1)."""
    from rollverify.training.launch import launch_config

    config = launch_config(2)
    assert config.local_addr == "127.0.0.1" and config.rdzv_endpoint.startswith("127.0.0.1:")


def test_sweep_method_replaces_the_files_and_names_that_are_almost_right_get_a_guess(
    tmp_path, monkeypatch, capsys
):
    from rollverify.experiments.sweep import load_grid

    assert load_grid(["ds", "dt"], {}, method="grpo").method == "grpo"
    config = str(tiny_file(tmp_path / "tiny.yaml"))
    output = ["--config", config, "--output", str(tmp_path / "runs")]
    for args, message in [
        (["sweep", "ds", "dt", "--method", "rollverfy"], "--method rollverfy: unknown (did you "),
        # sweeping methods, --method lists them: each is a grid point, checked as one
        (["sweep", "method", "--method", "grpo,rollverfy"], "grid point method=rollverfy"),
        (["compare", "grpo", "rolverify"], "methods: unknown rolverify (did you mean rollverify?)"),
        (["train", "--engine", "vlm"], "did you mean 'vllm'?"),
        (["train", "--method", "partal"], "did you mean partial?"),
    ]:
        result = run_rvctl([*args, *output], monkeypatch, capsys)
        assert result.returncode == 2, (args, result.stderr)
        assert message in errors(result)[0], (args, result.stderr)
    assert not (tmp_path / "runs").exists()
