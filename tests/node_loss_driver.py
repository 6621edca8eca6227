"""The driver of tests/test_node_loss_fast.py, run in the two-node cluster's network namespace
(python -m tests.node_loss_driver ADDRESS FOLDER): four VLLMEngines over the deterministic stub
sidecar (tests/stub_sidecar.py), each with its engine on the node with engine_node: one with
vllm.node_lost anywhere and one with stop, four partial trajectories each, every one with a
prefix of 5 tokens from an earlier rollout, submitted; and one (anywhere) in a collective weight
sync of SYNC_TENSORS tensors, a tenth of a second apart, and one (anywhere) loading as many
through Ray's object store. FOLDER/generating is written once all four are under way (the test
then kills the engine node's raylet); the first two are polled until their work is done or they
stop the run, the syncs are waited for. The lines they log are kept together. What happened
goes to FOLDER/result.json, by scenario. Then FOLDER/placed is written and the driver waits for
FOLDER/node-back (the test has started another engine node): the three engines placed on the
head load weights once their own bundles are placed again, and move back to them (under "home")."""

from __future__ import annotations

import json
import sys
import threading
import time
import warnings
from pathlib import Path

import torch

from rollverify.rollout.engines.node_loss import node_resources, wait_for_bundle
from rollverify.rollout.engines.ray_runtime import ensure_ray, stop_ray
from rollverify.rollout.engines.vllm_engine import VLLMEngine, VLLMSettings
from rollverify.rollout.trajectory import Trajectory
from tests.polling import wait_until
from tests.stub_sidecar import StubSidecar

MAX_NEW_TOKENS, PREFIX = 125, 5  # 120 tokens to go: 6 s at the stub's rate
POLICIES = ("anywhere", "stop")
SYNC_TENSORS, TENSOR_SECONDS = 60, 0.1  # a sync of 6 s: the kill meets it
HOME_TENSORS = 5  # the weights an engine that moves home takes (object store or collective)
MOVED = ("anywhere", "sync", "sync-store")  # the engines placed on the head, that move home


def trajectories() -> list[Trajectory]:
    made = []
    for i in range(4):
        trajectory = Trajectory(torch.tensor([1, 2, 3]), group_id=i // 2, sample_index=i % 2)
        trajectory.extend([50 + i] * PREFIX, [-0.5] * PREFIX, version=0)
        made.append(trajectory)
    return made


def engine(node_lost: str, weight_sync: str = "object_store") -> VLLMEngine:
    settings = VLLMSettings(
        model="stub",
        dtype="float32",
        max_model_len=512,
        slots_per_engine=8,
        weight_sync=weight_sync,
        node_resource="engine_node",
        node_lost_wait_seconds=1.0,
        node_lost=node_lost,
        engine_args=(("stub_tensor_seconds", TENSOR_SECONDS),),
    )
    return VLLMEngine(settings, MAX_NEW_TOKENS, temperature=1.0, version=1, sidecar=StubSidecar)


def run_to_end(engine: VLLMEngine) -> dict:
    """Poll until the engine's work is done (or it stops the run): what it finished, the
    lines it logged, where it ran last."""
    finished, error = [], None
    try:
        deadline = time.monotonic() + 90
        while engine.has_work and time.monotonic() < deadline:
            finished += engine.poll(0.1)
    except Exception as stopped:  # the run's stop: NodeLost
        error = f"{type(stopped).__name__}: {stopped}"
    return {
        "error": error,
        "done_at": time.monotonic(),
        "restarts": engine.restarts,
        "after": node_resources(engine.nodes[0]),
        "finished": [[t.key, t.token_ids.tolist(), t.versions.tolist()] for t in finished],
    }


def sync_to_end(engine: VLLMEngine, started: threading.Event) -> dict:
    """A collective sync of version 2 (SYNC_TENSORS small tensors), to its end or its error;
    `started` is set once the first tensors are on their way."""
    tensors = [(f"w{i}", torch.full((4,), float(i))) for i in range(SYNC_TENSORS)]

    def sent():  # the sync's tensors, one at a time: the first one tells the test
        for name, tensor in tensors:
            started.set()
            yield name, tensor

    class Stream(list):  # re-iterable: what rank 0 of an unsharded trainer sends
        specs = [(name, "float32", (4,)) for name, _ in tensors]

        def __iter__(self):
            return sent()

    error = None
    try:
        engine.load_weights(Stream(tensors), version=2)
    except Exception as stopped:
        error = f"{type(stopped).__name__}: {stopped}"
    import ray

    received = ray.get([actor.weights_received.remote() for actor in engine._actors])
    return {
        "error": error,
        "version": engine.version,
        "restarts": engine.restarts,
        "after": node_resources(engine.nodes[0]),
        "received": received,
    }


def move_home(engine: VLLMEngine) -> dict:
    """Once the engine's own bundle is placed again, a weight load (version 3) moves it home:
    where it runs then, what became of the group it ran in, the weights its sidecar has."""
    import ray
    from ray.util import placement_group_table

    away = list(engine._anywhere.values())
    placed = wait_for_bundle(engine._group, 0, time.monotonic() + 60)
    engine.load_weights([(f"w{i}", torch.full((4,), 3.0)) for i in range(HOME_TENSORS)], 3)
    return {
        "was_away": len(away),
        "bundle_placed": placed,
        "after": node_resources(engine.nodes[0]),
        "away_groups": [placement_group_table(group)["state"] for group in away],
        "anywhere": len(engine._anywhere),
        "restarts": engine.restarts,
        "version": engine.version,
        "received": ray.get([actor.weights_received.remote() for actor in engine._actors]),
    }


def main(address: str, folder: Path) -> None:
    ensure_ray(address)
    engines = {policy: engine(policy) for policy in POLICIES}
    engines["sync"] = engine("anywhere", weight_sync="collective")
    engines["sync-store"] = engine("anywhere")  # (object_store)
    result: dict = {}
    syncing, outcome = threading.Event(), {}
    # the engines' lines, all together (warnings are caught process-wide, not per thread)
    caught = warnings.catch_warnings(record=True)
    lines = caught.__enter__()
    warnings.simplefilter("always")
    try:
        for name, started in engines.items():
            started.start()
            result[name] = {"before": node_resources(started.nodes[0])}
        syncs = [
            threading.Thread(
                target=lambda n=n, e=e: outcome.update({n: sync_to_end(engines[n], e)})
            )
            for n, e in (("sync", syncing), ("sync-store", threading.Event()))
        ]
        for sync in syncs:
            sync.start()
        syncing.wait(60)
        time.sleep(1.0)  # some tensors received, most still to come
        # submitted last: their 6 s start as the test is told to kill (submitted before the
        # syncs, a slow machine's actor starts had let them finish before the kill)
        for policy in POLICIES:
            engines[policy].submit(trajectories())
        (folder / "generating").touch()
        for policy in POLICIES:
            result[policy] |= run_to_end(engines[policy])
        for sync in syncs:
            sync.join(120)
        for name, done in outcome.items():
            result[name] |= done
        result["lines"] = [str(w.message) for w in lines]
        (folder / "placed").touch()
        wait_until((folder / "node-back").exists, 120)
        result["home"] = {name: move_home(engines[name]) for name in MOVED}
        result["home_lines"] = [str(w.message) for w in lines][len(result["lines"]) :]
    finally:
        caught.__exit__(None, None, None)
        for started in engines.values():
            started.shutdown()
        stop_ray()
    (folder / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
