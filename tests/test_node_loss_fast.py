"""A lost engine node in seconds: two real Ray nodes (tests/ray_nodes.py), a VLLMEngine whose
sidecar is the deterministic stub (tests/stub_sidecar.py) placed by vllm.node_resource on the
second, that node's raylet SIGKILLed by pid while four partial trajectories are in flight
there. make test's node-loss test; the vLLM runs are tests/test_node_loss.py (long tier)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.polling import wait_until
from tests.ray_nodes import namespace_available, two_nodes
from tests.sockets import process_name, tree

pytestmark = [
    pytest.mark.slow,
    pytest.mark.ray,
    pytest.mark.skipif(not namespace_available(), reason="needs `ip netns` (root)"),
]

PREFIX, MAX_NEW_TOKENS = 5, 85  # as tests/node_loss_driver.py


def _stubs(node) -> int:
    return sum("StubSidecar" in process_name(p) for p in tree(node.pid))


def test_an_engine_on_a_lost_node_is_placed_again_and_its_trajectories_keep_their_tokens(
    tmp_path,
):
    """The engine runs on the engine node (its actor under that node's raylet, Ray's node id
    the node's); killed there, the engine notices within seconds (Ray's health checks at
    200 ms), says so in one line, waits vllm.node_lost_wait_seconds (1 s) for another engine
    node, then starts on the head; each trajectory in flight finishes once, its 5 tokens from
    before the submit kept as they were, only what the lost engine generated made again."""
    with two_nodes(tmp_path, health_check_ms=200) as cluster:
        command = [sys.executable, "-m", "tests.node_loss_driver", cluster.address]
        driver = subprocess.Popen(
            cluster.command(*command, str(tmp_path), "anywhere"),
            env=cluster.env,
            stderr=(tmp_path / "driver.log").open("w"),
        )
        try:
            assert wait_until(
                lambda: (tmp_path / "generating").exists() or driver.poll() is not None, 60
            ), "the driver submitted"
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            on_engine_node, on_head = _stubs(cluster.worker), _stubs(cluster.head)
            killed = cluster.kill_raylet(cluster.worker)
            driver.wait(timeout=120)
        finally:
            if driver.poll() is None:
                driver.kill()
    assert driver.returncode == 0, (tmp_path / "driver.log").read_text()[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert (on_engine_node, on_head) == (1, 0), "the engine ran on the engine node"
    assert result["error"] is None, result["error"]
    assert result["restarts"] == 1, result
    before, after = result["where"]  # the resources of the node each engine ran on
    assert before.get("engine_node") == 1 and "engine_node" not in after, (before, after)
    (line,) = result["lines"]
    assert "vllm: engine 0's node" in line and "4 unfinished trajectories wait" in line, line
    finished = sorted(result["finished"])
    assert [key for key, _, _ in finished] == [[0, 0], [0, 1], [1, 0], [1, 1]]
    for (group, sample), tokens, versions in finished:
        assert tokens[:PREFIX] == [50 + 2 * group + sample] * PREFIX  # kept as it was
        assert versions == [0] * PREFIX + [1] * (MAX_NEW_TOKENS - PREFIX)
    print(f"the run went on {result['done_at'] - killed:.1f} s after the kill")
