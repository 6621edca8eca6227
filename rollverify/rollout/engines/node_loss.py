"""Where a lost node's engines go: Ray's view of the nodes and of the engines' placement group.

Ray marks a node dead once its raylet misses its health checks (RAY_health_check_period_ms x
RAY_health_check_failure_threshold on the head: 3 s x 5 by default, docs/clusters.md); the
engines' placement group then reschedules the bundles it had there on nodes with room that
have what a bundle asks (vllm.node_resource among it). An engine of the lost node waits for its
bundle up to vllm.node_lost_wait_seconds; then vllm.node_lost says: anywhere (a placement group
of its own, without the resource: any node with room) or stop (NodeLost, the run stops).
"""

from __future__ import annotations

import time
from typing import Any

from rollverify.rollout.engines.protocol import EngineLost
from rollverify.rollout.engines.vllm_settings import SidecarFailed

POLL_S = 0.5  # Ray's view, asked this often while an engine waits for a node


class NodeLost(SidecarFailed, EngineLost):
    """An engine's node was lost and no node to put it on came within the wait: the run stops
    after a checkpoint of where it is (EngineLost)."""


def node_alive(node_id: str) -> bool:
    """The GCS holds node `node_id` alive (a lost raylet is alive here until its health
    checks run out)."""
    import ray

    return any(node["NodeID"] == node_id and node["Alive"] for node in ray.nodes())


def node_resources(node_id: str) -> dict[str, float]:
    """What node `node_id` has (Ray's totals: CPU, GPU, custom resources), for the log."""
    import ray

    for node in ray.nodes():
        if node["NodeID"] == node_id:
            return {k: v for k, v in node["Resources"].items() if not k.startswith("node:")}
    return {}


def bundle_placed(group: Any, index: int) -> bool:
    """Bundle `index` of the placement group is on a live node."""
    from ray.util import placement_group_table

    node = placement_group_table(group).get("bundles_to_node_id", {}).get(index)
    return node is not None and node_alive(node)


def wait_for_bundle(group: Any, index: int, deadline: float) -> bool:
    """Until Ray has put bundle `index` on a live node again (True) or the deadline (False)."""
    while not bundle_placed(group, index):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def group_anywhere(settings: Any, timeout: float) -> Any:
    """A placement group of one engine's bundle without vllm.node_resource (any node with room),
    reserved; NodeLost if Ray cannot within `timeout`."""
    import ray

    from rollverify.rollout.engines.ray_runtime import engine_bundle, reserved

    bundle = engine_bundle(settings, anywhere=True)
    group = reserved([bundle], "PACK", timeout)  # (PACK: Ray's default, one bundle either way)
    if group is None:
        raise NodeLost(
            f"vllm.node_lost: no node left has room for an engine ({bundle}; cluster resources "
            f"available: {ray.available_resources()}); rvctl resume continues the run from "
            "its last checkpoint once nodes are back"
        )
    return group
