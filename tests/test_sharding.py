"""The gathers and the checkpoint a sharded (FSDP2) trainer needs, on a real 2-process gloo
world: the embedded default model sharded as accelerate shards it (tests/sharded_worker.py).
accelerate shards CUDA devices only, so the trainer itself runs FSDP on GPUs; these are the
parts that are ours.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from rollverify.config import ConfigError
from rollverify.training.checkpoint.export import export
from rollverify.training.checkpoint.files import ALIASES, check
from rollverify.training.run import train
from tests.runs import tiny

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("sharded_worker.py")


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory) -> Path:
    """The folder the 2-process world wrote: result.json, run/ (its checkpoints)."""
    folder = tmp_path_factory.mktemp("sharded")
    (folder / "run").mkdir()
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", str(WORKER), str(folder / "result.json")]
    result = subprocess.run([*command, str(folder / "run")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder


@pytest.fixture(scope="module")
def gathered(sharded_run) -> dict:
    return json.loads((sharded_run / "result.json").read_text())


def test_whole_tensors_gathered_from_the_shards_are_the_model(gathered):
    assert gathered["sharded"] and not gathered["reference_sharded"]
    assert gathered["keys_equal"] and gathered["weights_gap_before"] == 0.0
    # one AdamW step on half the batch per rank = the unsharded step on all of it
    assert gathered["weights_gap_after_step"] < 1e-4
    assert gathered["probe_gap"] < 1e-5  # the weight-sync probe, forward through the shards


def test_the_weight_stream_of_shards_announces_whole_tensors_before_gathering_them(gathered):
    """A collective weight sync allocates each tensor on the engines from its spec: a spec
    with a shard's shape would garble the broadcast. Rank 0 alone cannot send sharded
    weights again (a replaced engine between syncs): the stream says so."""
    assert gathered["stream_specs_match"]
    assert not gathered["stream_restartable"] and gathered["reference_stream_restartable"]
    # a run's first sync streams the model before accelerate shards it in place: asked later
    # (a sidecar replaced before the second sync), it must not gather on rank 0 alone
    assert not gathered["first_sync_restartable_once_sharded"]


def test_a_weight_stream_does_not_keep_its_model_alive():
    """An engine keeps its last sync's stream for a replacement; a finished run's model (on
    a GPU) must still be freed."""
    from transformers import AutoModelForCausalLM

    from rollverify.config import load_config
    from rollverify.training.weight_sync import WeightStream

    model = AutoModelForCausalLM.from_pretrained(load_config().model_path())
    stream = WeightStream(model, "float32")
    assert stream.restartable and len(list(stream)) == len(model.state_dict())
    del model
    gc.collect()
    assert not stream.restartable


def test_each_rank_writes_its_part_and_a_reader_gets_the_state_whole(gathered, sharded_run):
    """A sharded checkpoint gathers nothing: rank r writes shard-0000<r+1> of the weights and
    of AdamW's moments; rank 0 the rest and the manifest last. Read back (as a resume reads
    it), it is the model and the optimizer state of the unsharded run; a resume into fresh
    shards reads each rank's part of the moments only, and written again it is unchanged."""
    folder = sharded_run / "run" / "checkpoints" / "step-000001"
    assert check(folder) is None
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    parts = [f"shard-0000{rank}-model-00001-of-00001.safetensors" for rank in (1, 2)]
    assert files == [
        "manifest.json",
        f"model.shards/{ALIASES}",
        *(f"model.shards/{part}" for part in parts),
        *(f"optimizer.shards/{part}" for part in parts),
        "rng.safetensors",
        "state.json",
    ]
    # each file holds its rank's rows of each tensor (not whole tensors, shared out): layer
    # 0's up_proj weight (384 x 128, the optimizer's parameter 8), its moment, and the root
    # unit's embedding (20 x 128: after a forward alone the root holds it gathered)
    for group, name, rows in [
        ("model", "model.layers.0.mlp.up_proj.weight", 192),
        ("optimizer", "8.exp_avg", 192),
        ("model", "model.embed_tokens.weight", 10),
    ]:
        shapes = [_shape(folder / f"{group}.shards" / part, name) for part in parts]
        assert shapes == [[rows, 128], [rows, 128]], (name, shapes)
    assert gathered["checkpoint_weights_gap"] == 0.0  # the parts, put together: the model
    assert gathered["optimizer_indexes_equal"]
    assert gathered["optimizer_gap"] < 1e-6  # as the unsharded model's state_dict() gives it
    assert gathered["optimizer_roundtrip_gap"] == 0.0  # into fresh shards and out, unchanged
    assert not gathered["resume_read_whole_moments"]  # each rank read its own parts only


def _shape(path: Path, name: str) -> list[int]:
    with safe_open(str(path), framework="pt") as file:
        return file.get_slice(name).get_shape()


def test_rvctl_export_puts_a_sharded_checkpoint_together(sharded_run, tmp_path):
    run_dir = sharded_run / "run"
    export(run_dir, tmp_path / "model", step=1)
    exported = load_file(str(tmp_path / "model" / "model.safetensors"))
    gathered = load_file(str(run_dir / "gathered.safetensors"))
    assert exported.keys() <= gathered.keys()  # (the tied lm_head stored once)
    assert all(torch.equal(exported[name], gathered[name]) for name in exported)
    # step 2's parts, written in files of 256 KiB of whole tensors: several per rank
    damaged = run_dir / "checkpoints" / "step-000002"
    parts = sorted((damaged / "model.shards").glob("shard-00002-model-*-of-*.safetensors"))
    assert len(parts) > 1
    export(run_dir, tmp_path / "from-files", step=2)
    again = load_file(str(tmp_path / "from-files" / "model.safetensors"))
    fresh = load_file(str(run_dir / "gathered-2.safetensors"))
    assert again.keys() == exported.keys()
    assert all(torch.equal(again[name], fresh[name]) for name in again)
    # a rank's part that does not match the manifest: refused, naming the part
    part = parts[-1]
    part.write_bytes(part.read_bytes()[:-8])
    with pytest.raises(ValueError, match="model.shards/shard-00002-.* does not match"):
        export(run_dir, tmp_path / "again", step=2)
    assert check(damaged).startswith("model.shards/shard-00002")


def test_rank_0s_items_are_scored_in_equal_parts_by_every_rank(gathered):
    assert gathered["scored_per_rank"] == [3, 3]  # 5 items: 3 + 2, the last padded
    assert gathered["split_gap"] < 1e-6  # the rows in order, as one pass scores them


def test_fsdp_on_a_cpu_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="train.sharding: fsdp needs GPUs"):
        train(tiny(tmp_path, "grpo", store=False, **{"train.sharding": "fsdp"}))
    assert not list(tmp_path.iterdir())
