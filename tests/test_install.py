"""A non-editable install works outside the checkout: the embedded model, the shipped math data,
sweep specs and experiment configs are package data (the last two mapped from the repository's
top level at build time), and the paths in a config resolve against the config file's folder,
then the working directory, then that package data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rollverify.config import ConfigError, load_config, with_overrides
from rollverify.infra.paths import ASSETS, TOP_LEVEL, canonical, locate
from tests.mutants import copy_checkout

PROBE = """
import json, rollverify, rvctl
from rollverify.config import load_config
from rollverify.infra.paths import locate
from rollverify.experiments.sweep import load_grid
math = load_config("experiments/qwen3-8b-dapo-math.yaml")  # a shipped config, by its name
print(json.dumps({
    "rollverify": rollverify.__file__,
    "rvctl": rvctl.__file__,
    "model": load_config().model_path(),
    "data_name": math.task.eval_files["aime24"],
    "data_file": str(locate(math.task.eval_files["aime24"])),
    "grid": load_grid(["ds", "dt"], {}).values,
}))
"""


@pytest.mark.slow
def test_a_non_editable_install_trains_the_embedded_default_from_an_empty_folder(tmp_path):
    """An sdist of the checkout, `pip install`ed (into a folder, no dependencies: they come
    from this venv), then `rvctl train` from an empty working directory, importing the
    installed copy only."""
    source, site, work = tmp_path / "source", tmp_path / "site", tmp_path / "work"
    copy_checkout(source)
    # from an sdist, as an index would serve it: it must carry experiments/ and sweeps/ too
    sdist = [sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path / "dist")]
    subprocess.run(sdist, cwd=source, check=True, capture_output=True)
    (archive,) = (tmp_path / "dist").glob("rollverify-*.tar.gz")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    pip += ["--no-build-isolation", "--target", str(site), str(archive)]
    subprocess.run(pip, check=True, capture_output=True)
    shutil.rmtree(source)  # nothing may be read from the copy it was built from
    work.mkdir()
    env = os.environ | {"PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}

    probe = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=work, env=env, capture_output=True, text=True
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.splitlines()[-1])
    for name in ("rollverify", "model", "data_file"):
        assert Path(found[name]).resolve().is_relative_to(site), (name, found[name])
    assert Path(found["rvctl"]).resolve().is_relative_to(site)
    assert found["data_name"] == "data/math/aime24.json"  # kept by name: found in the site
    assert found["grid"]["verify.ds"] == [0.005, 0.01, 0.02, 0.05]  # the shipped ds_dt.yaml

    for name in ("experiments/default.yaml", "sweeps/ds_dt.yaml"):  # mapped in by setup.py
        assert (site / "rollverify" / "assets" / name).is_file(), name
    train = [str(site / "bin" / "rvctl"), "train", "--config", "experiments/default.yaml"]
    train += ["--steps", "2", "--engine", "hf"]
    train += ["--output", "runs", "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}"]
    done = subprocess.run(
        [*train, "--format", "json"], cwd=work, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [summary] = json.loads(done.stdout)
    run_dir = work / summary["run_dir"]  # relative to the working directory, or absolute
    assert run_dir.resolve().is_relative_to(work.resolve())
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 2
    assert (run_dir / "checkpoints" / "step-000002").is_dir()
    assert (work / "mlflow.db").is_file()


def test_recipes_and_grids_are_at_the_top_level_once_and_found_from_any_folder(
    tmp_path, monkeypatch
):
    """experiments/ and sweeps/ live at the repository's top level, one copy each (the wheel
    gets its copy at build time); a checkout finds them by name from any folder."""
    top = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    for name in TOP_LEVEL:
        assert (top / name / "README.md").is_file()
        assert not (ASSETS / name).exists(), f"a second copy of {name}/ in the package's assets"
    assert locate("experiments/default.yaml") == top / "experiments" / "default.yaml"
    assert load_config("experiments/qwen3-8b-dapo-math.yaml").model.path == "Qwen/Qwen3-8B-Base"
    assert canonical("sweeps/ds_dt.yaml") == "sweeps/ds_dt.yaml"  # kept by name
    # a file of the user's in the checkout is theirs, kept absolute as anywhere else
    assert canonical("pyproject.toml", top) == str(top / "pyproject.toml")


def test_relative_paths_in_a_config_resolve_against_its_folder_first(tmp_path, monkeypatch):
    folder, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    shutil.copytree(ASSETS / "models" / "tiny-qwen3-chain", folder / "model")
    (folder / "problems.json").write_text("[]")
    (folder / "run.yaml").write_text(
        "model:\n  path: model\ntask:\n  name: math\n  train_file: problems.json\n"
        "  eval_file: problems.json\n"
    )
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(folder / "run.yaml")
    assert config.model_path() == str(folder / "model")
    assert config.task.train_file == config.task.eval_file == str(folder / "problems.json")
    assert load_config(Path("..") / "project" / "run.yaml").task.train_file == str(
        folder / "problems.json"
    )


def test_then_against_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "run.yaml").write_text("task:\n  train_file: mine.json\n")
    (tmp_path / "mine.json").write_text("[]")
    monkeypatch.chdir(tmp_path)
    config = load_config("configs/run.yaml")
    assert config.task.train_file == str(tmp_path / "mine.json")
    assert with_overrides(config, {}).task.train_file == str(tmp_path / "mine.json")


def test_the_shipped_defaults_keep_their_names_and_resolve_to_package_data(tmp_path, monkeypatch):
    """The run's config.yaml reads the same on any install, so resuming it compares equal."""
    monkeypatch.chdir(tmp_path)
    config = load_config("experiments/default.yaml")  # the shipped config, by its name
    assert config.model.path == "models/tiny-qwen3-chain"
    assert config.model_path() == str(ASSETS / "models" / "tiny-qwen3-chain")
    assert config.task.train_file == "data/math/math_train.json"
    assert (ASSETS / config.task.train_file).is_file()
    assert with_overrides(config, {}) == config


def test_a_missing_path_names_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("task:\n  name: math\n  train_file: absent.json\n")
    config = load_config(tmp_path / "c.yaml")  # loads: data is needed when training starts
    with pytest.raises(ConfigError) as error:
        config.check_data()
    [problem] = error.value.problems
    assert problem.startswith("task.train_file: no file absent.json in ")
    assert str(tmp_path) in problem and "the package's data" in problem


def test_a_hub_id_is_kept_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(overrides={"model.path": "Qwen/Qwen3-8B-Base"})
    assert config.model.path == config.model_path() == "Qwen/Qwen3-8B-Base"
