"""A sweep trial's model path: a shipped model by its name, a model of the user's absolute."""

from pathlib import Path

from rollverify.config import load_config
from rollverify.experiments.sweep import Grid, trial_base
from rollverify.infra.paths import shipped

WALK = "models/tiny-qwen3-walk"  # experiments/stale.yaml's model, shipped with the package


def test_a_shipped_model_keeps_its_name_so_a_moved_install_still_resumes(tmp_path, monkeypatch):
    """The study's trials stored this install's absolute path; after a reinstall elsewhere
    their resume was refused ('model.path: /old/... in the checkpoint, /new/... now')."""
    base = trial_base(load_config("experiments/stale.yaml"), Grid("grpo", 1, {}), tmp_path, "x")
    assert base["model.path"] == WALK
    monkeypatch.chdir(tmp_path)  # Tune's trial folder: the name still finds the shipped model
    assert Path(load_config(overrides=base).model_path()) == shipped(WALK)


def test_a_model_found_in_the_working_directory_is_made_absolute(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / WALK).symlink_to(shipped(WALK), target_is_directory=True)
    monkeypatch.chdir(tmp_path)  # the user's own folder of that name wins over the shipped one
    config = load_config("experiments/stale.yaml")
    base = trial_base(config, Grid("grpo", 1, {}), tmp_path, "x")
    assert base["model.path"] == str(tmp_path / WALK)


def test_a_checkpoint_naming_the_shipped_model_by_its_absolute_path_still_resumes():
    """Sweeps before this fix stored the absolute path; the same folder by name is no change,
    another folder still is."""
    from rollverify.training.checkpoint.run_state import config_changes

    config = load_config("experiments/stale.yaml").to_dict()
    saved = {**config, "model": {**config["model"], "path": str(shipped(WALK))}}
    assert config_changes(saved, config) == []
    other = {
        **config,
        "model": {**config["model"], "path": str(shipped("models/tiny-qwen3-chain"))},
    }
    (problem,) = config_changes(other, config)
    assert problem.startswith("model.path: ")
