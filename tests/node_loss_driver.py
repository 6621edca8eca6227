"""The driver of tests/test_node_loss_fast.py, run in the two-node cluster's network namespace
(python -m tests.node_loss_driver ADDRESS FOLDER): two VLLMEngines over the deterministic stub
sidecar (tests/stub_sidecar.py), each with its engine on the node with engine_node, one with
vllm.node_lost anywhere and one with stop; four partial trajectories each, every one with a
prefix of 5 tokens from an earlier rollout, submitted; FOLDER/generating written (the test then
kills the engine node's raylet); each engine polled until its work is done or it stops the
run. What happened goes to FOLDER/result.json, by node_lost."""

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
POLICIES = ("anywhere", "stop")


def trajectories() -> list[Trajectory]:
    made = []
    for i in range(4):
        trajectory = Trajectory(torch.tensor([1, 2, 3]), group_id=i // 2, sample_index=i % 2)
        trajectory.extend([50 + i] * PREFIX, [-0.5] * PREFIX, version=0)
        made.append(trajectory)
    return made


def engine(node_lost: str) -> VLLMEngine:
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
    return VLLMEngine(settings, MAX_NEW_TOKENS, temperature=1.0, version=1, sidecar=StubSidecar)


def run_to_end(engine: VLLMEngine) -> dict:
    """Poll until the engine's work is done (or it stops the run): what it finished, the
    lines it logged, where it ran last."""
    finished, error = [], None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            deadline = time.monotonic() + 90
            while engine.has_work and time.monotonic() < deadline:
                finished += engine.poll(0.1)
        except Exception as stopped:  # the run's stop: NodeLost
            error = f"{type(stopped).__name__}: {stopped}"
    return {
        "error": error,
        "done_at": time.monotonic(),
        "lines": [str(w.message) for w in caught],
        "restarts": engine.restarts,
        "after": node_resources(engine.nodes[0]),
        "finished": [[t.key, t.token_ids.tolist(), t.versions.tolist()] for t in finished],
    }


def main(address: str, folder: Path) -> None:
    ensure_ray(address)
    engines = {policy: engine(policy) for policy in POLICIES}
    result: dict = {}
    try:
        for policy, started in engines.items():
            started.start()
            result[policy] = {"before": node_resources(started.nodes[0])}
            started.submit(trajectories())
        (folder / "generating").touch()
        for policy, started in engines.items():
            result[policy] |= run_to_end(started)
    finally:
        for started in engines.values():
            started.shutdown()
        stop_ray()
    (folder / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
