"""The driver of tests/test_node_loss_fast.py, run in the two-node cluster's network namespace
(python -m tests.node_loss_driver ADDRESS FOLDER): a VLLMEngine over the deterministic stub
sidecar (tests/stub_sidecar.py), its engine on the node with engine_node; four partial
trajectories, each with a prefix of 5 tokens from an earlier rollout, submitted; FOLDER/
generating written (the test then kills the engine node's raylet); polled until every one is
done. What happened goes to FOLDER/result.json."""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import torch

from rollverify.rollout.engines.node_loss import node_resources
from rollverify.rollout.engines.ray_runtime import ensure_ray, stop_ray
from rollverify.rollout.engines.vllm_engine import VLLMEngine, VLLMSettings
from rollverify.rollout.trajectory import Trajectory
from tests.stub_sidecar import StubSidecar

MAX_NEW_TOKENS, PREFIX = 85, 5  # 80 tokens to go: 4 s at the stub's rate


def trajectories() -> list[Trajectory]:
    made = []
    for i in range(4):
        trajectory = Trajectory(torch.tensor([1, 2, 3]), group_id=i // 2, sample_index=i % 2)
        trajectory.extend([50 + i] * PREFIX, [-0.5] * PREFIX, version=0)
        made.append(trajectory)
    return made


def main(address: str, folder: Path, node_lost: str) -> None:
    ensure_ray(address)
    settings = VLLMSettings(
        model="stub",
        dtype="float32",
        max_model_len=512,
        slots_per_engine=8,
        weight_sync="object_store",
        node_resource="engine_node",
        node_lost_wait_seconds=1.0,
        node_lost=node_lost,
    )
    engine = VLLMEngine(settings, MAX_NEW_TOKENS, temperature=1.0, version=1, sidecar=StubSidecar)
    result: dict = {}
    try:
        engine.start()
        result["before"] = dict(engine.nodes)
        result["where"] = [node_resources(result["before"][0])]  # (a dead node has none)
        sent = trajectories()
        engine.submit(sent)
        (folder / "generating").write_text(str(time.monotonic()))
        finished, result["error"] = [], None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                deadline = time.monotonic() + 90
                while engine.has_work and time.monotonic() < deadline:
                    finished += engine.poll(0.1)
            except Exception as error:  # the run's stop: NodeLost
                result["error"] = f"{type(error).__name__}: {error}"
        result["done_at"] = time.monotonic()
        result["lines"] = [str(w.message) for w in caught]
        result["after"], result["restarts"] = dict(engine.nodes), engine.restarts
        result["where"].append(node_resources(result["after"][0]))
        result["finished"] = [[t.key, t.token_ids.tolist(), t.versions.tolist()] for t in finished]
    finally:
        engine.shutdown()
        stop_ray()
    (folder / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
