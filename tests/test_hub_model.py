"""A hub model (model.path a hub id) at a pinned model.revision, from the local Hugging Face
cache: the run loads that revision's snapshot, the vLLM sidecars are asked for it, and a
revision that is not there is refused in one line before anything starts. (Downloading needs
the hub, which this machine cannot reach: `rollverify/infra/hub.py` announces each file.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rollverify.config import load_config
from rollverify.config.model_shape import ModelShape
from rollverify.infra.hub import cached_snapshot, model_folder
from rollverify.infra.paths import ASSETS
from rollverify.training.parts import vllm_settings
from rollverify.training.preflight import model_found
from rollverify.training.run import train
from tests.runs import tiny

TINY_MODEL = ASSETS / "models" / "tiny-qwen3-chain"
REPO = "someone/tiny-qwen3"
MAIN, PINNED = "a" * 40, "b" * 40  # two commits of it


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """A Hugging Face cache holding two snapshots of the tiny model (main, and tag v1 at
    another commit), and no hub to ask."""
    cache = tmp_path / "hub"
    repo = cache / f"models--{REPO.replace('/', '--')}"
    for commit in (MAIN, PINNED):
        shutil.copytree(TINY_MODEL, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(MAIN)
    (repo / "refs" / "v1").write_text(PINNED)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return repo


def config(tmp_path, revision=None):
    return load_config(
        overrides={"model.path": REPO, "model.revision": revision, "output": str(tmp_path)}
    )


def test_a_revision_picks_its_snapshot_from_the_cache(hub_cache, tmp_path):
    assert model_folder(REPO, None) == str(hub_cache / "snapshots" / MAIN)
    assert model_folder(REPO, "v1") == str(hub_cache / "snapshots" / PINNED)
    assert model_folder(REPO, PINNED) == str(hub_cache / "snapshots" / PINNED)
    found, problems = model_found(config(tmp_path, "v1"))
    assert problems == [] and found == f"{REPO} at v1 (in the Hugging Face cache)"
    engine_kwargs = vllm_settings(config(tmp_path, "v1")).engine_kwargs(seed=0)
    assert engine_kwargs["model"] == REPO and engine_kwargs["revision"] == "v1"
    assert "revision" not in vllm_settings(config(tmp_path)).engine_kwargs(seed=0)


def test_a_revision_that_is_not_cached_or_a_local_folder_is_refused(hub_cache, tmp_path):
    (problem,) = model_found(config(tmp_path, "v2"))[1]
    assert problem.startswith(f"model.path: {REPO} at v2 is not in the local Hugging Face cache")
    assert f"hf download {REPO} --revision v2" in problem
    local = load_config(overrides={"model.revision": "v1", "output": str(tmp_path)})
    (problem,) = model_found(local)[1]
    assert problem.startswith("model.revision: v1 is for a hub id")


def test_a_run_trains_the_pinned_snapshot(hub_cache, tmp_path):
    for weights in (hub_cache / "snapshots" / MAIN).glob("*.safetensors"):
        weights.write_bytes(b"not the pinned revision")  # main would not load
    settings = {"model.path": REPO, "model.revision": "v1", "train.steps": 1}
    assert train(tiny(tmp_path, "grpo", **settings)).steps == 1


def test_only_the_pinned_revision_cached_is_enough_and_a_partial_snapshot_is_not(
    hub_cache, tmp_path
):
    """The cost model reads the pinned revision's config (no main needed), and a snapshot
    without its weights (a download cut short) is not taken for the model."""
    (hub_cache / "refs" / "main").unlink()
    shutil.rmtree(hub_cache / "snapshots" / MAIN)
    pinned = config(tmp_path, "v1")
    assert ModelShape.of(REPO, revision="v1") == ModelShape.of(str(TINY_MODEL))
    assert model_found(pinned)[1] == []
    for weights in (hub_cache / "snapshots" / PINNED).glob("*.safetensors"):
        weights.unlink()
    assert cached_snapshot(REPO, "v1") is None
