"""The gathers a sharded (FSDP2) trainer needs, on a real 2-process gloo world: the embedded
default model sharded as accelerate shards it (tests/sharded_worker.py). accelerate shards
CUDA devices only, so the trainer itself runs FSDP on GPUs; these are the parts that are ours.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rollverify.config import ConfigError
from rollverify.training.run import train
from tests.runs import tiny

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("sharded_worker.py")


@pytest.fixture(scope="module")
def gathered(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("sharded") / "result.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", str(WORKER), str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


def test_whole_tensors_gathered_from_the_shards_are_the_model(gathered):
    assert gathered["sharded"] and not gathered["reference_sharded"]
    assert gathered["keys_equal"] and gathered["weights_gap_before"] == 0.0
    # one AdamW step on half the batch per rank = the unsharded step on all of it
    assert gathered["weights_gap_after_step"] < 1e-4
    assert gathered["probe_gap"] < 1e-5  # the weight-sync probe, forward through the shards


def test_the_optimizer_state_gathers_whole_and_goes_back_into_shards(gathered):
    assert gathered["optimizer_indexes_equal"] and gathered["param_groups_equal"]
    assert gathered["optimizer_gap"] < 1e-6  # as the unsharded model's state_dict() gives it
    assert gathered["optimizer_roundtrip_gap"] == 0.0  # loaded into fresh shards, unchanged


def test_rank_0s_items_are_scored_in_equal_parts_by_every_rank(gathered):
    assert gathered["scored_per_rank"] == [3, 3]  # 5 items: 3 + 2, the last padded
    assert gathered["split_gap"] < 1e-6  # the rows in order, as one pass scores them


def test_fsdp_on_a_cpu_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="train.sharding: fsdp needs GPUs"):
        train(tiny(tmp_path, "grpo", **{"train.sharding": "fsdp"}))
    assert not list(tmp_path.iterdir())
