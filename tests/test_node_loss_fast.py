"""A lost engine node in seconds: two real Ray nodes (benchmarks/ray_nodes.py), a VLLMEngine whose
sidecar is the deterministic stub (tests/stub_sidecar.py) placed by vllm.node_resource on the
second, that node's raylet SIGKILLed by pid while four partial trajectories are in flight
there. make test's node-loss test; the vLLM runs are tests/test_node_loss.py (long tier)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from benchmarks.ray_nodes import namespace_available, two_nodes
from tests.node_loss_driver import HOME_TENSORS, MAX_NEW_TOKENS, MOVED, PREFIX, SYNC_TENSORS
from tests.polling import wait_until
from tests.sockets import process_name, tree

pytestmark = [
    pytest.mark.slow,
    pytest.mark.ray,
    pytest.mark.skipif(not namespace_available(), reason="needs `ip netns` (root)"),
]


def _stubs(node) -> int:
    return sum("StubSidecar" in process_name(p) for p in tree(node.pid))


def test_engines_on_a_lost_node_are_placed_again_or_stop_the_run_and_keep_their_tokens(
    tmp_path,
):
    """Two engines run on the engine node (their actors under that node's raylet, on the node
    with engine_node); killed there, each notices within seconds (Ray's health checks at
    200 ms), says so in one line and waits vllm.node_lost_wait_seconds (1 s) for another
    engine node. Then, vllm.node_lost anywhere: it starts on the head, and each trajectory in
    flight finishes once, its 5 tokens from before the submit kept as they were, only what
    the lost engine made made again; stop: it stops the run with one line naming the field
    and rvctl resume."""
    with two_nodes(tmp_path, engine_cpus=4, head_cpus=3, health_check_ms=200) as cluster:
        command = [sys.executable, "-m", "tests.node_loss_driver", cluster.address]
        driver = subprocess.Popen(
            cluster.command(*command, str(tmp_path)),
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
            assert wait_until(
                lambda: (tmp_path / "placed").exists() or driver.poll() is not None, 120
            ), "the engines were placed again or stopped"
            cluster.add_engine_node(cpus=4)  # a lost host's replacement
            (tmp_path / "node-back").touch()
            driver.wait(timeout=180)
        finally:
            if driver.poll() is None:
                driver.kill()
    assert driver.returncode == 0, (tmp_path / "driver.log").read_text()[-3000:]
    assert (on_engine_node, on_head) == (4, 0), "the engines ran on the engine node"
    result = json.loads((tmp_path / "result.json").read_text())
    for name in ("anywhere", "stop", "sync", "sync-store"):
        assert result[name]["before"].get("engine_node") == 1, result[name]
    # one line per engine: the two generating (4 trajectories wait), the one in a sync (none)
    waiting = r"vllm: engine 0's node \w+ was lost \(\w+\); (\d) unfinished trajectories wait"
    shown = sorted(
        (re.match(waiting, line).group(1), line.rsplit(", ", 1)[1]) for line in result["lines"]
    )
    assert shown == [
        ("0", "then any node with room)"),
        ("0", "then any node with room)"),
        ("4", "then any node with room)"),
        ("4", "then stop)"),
    ], result["lines"]

    placed = result["anywhere"]
    assert placed["error"] is None and placed["restarts"] == 1, placed
    assert "engine_node" not in placed["after"], "on the head"
    finished = sorted(placed["finished"])
    assert [key for key, _, _ in finished] == [[0, 0], [0, 1], [1, 0], [1, 1]]
    for (group, sample), tokens, versions in finished:
        assert tokens[:PREFIX] == [50 + 2 * group + sample] * PREFIX  # kept as it was
        assert versions == [0] * PREFIX + [1] * (MAX_NEW_TOKENS - PREFIX)
    print(f"the engine ran again, its work done, {placed['done_at'] - killed:.1f} s after the kill")

    # lost while a collective weight sync was on its way: placed again, and the whole sync
    # sent again (to every live engine: none keeps half of it); the run goes on
    # (collective: the whole sync broadcast again; object_store: the new engine loads the
    # copy kept in the object store)
    for name in ("sync", "sync-store"):
        synced = result[name]
        assert synced["error"] is None and synced["version"] == 2, synced
        assert synced["restarts"] == 1 and "engine_node" not in synced["after"], synced
        assert synced["received"] == [SYNC_TENSORS], (name, "the new engine received the sync")

    stopped = result["stop"]
    assert stopped["error"].startswith("NodeLost: vllm.node_lost: stop: no node with engine_node")
    assert "rvctl resume" in stopped["error"] and not stopped["finished"], stopped

    # Another engine node joins: each engine placed on the head moves back to its own bundle,
    # there, at its next weight load (nothing in flight), and gives back the group it ran in.
    assert len(result["home_lines"]) == len(MOVED), result["home_lines"]
    assert all("moves back to its own bundle" in line for line in result["home_lines"])
    for name in MOVED:
        home = result["home"][name]
        assert home["was_away"] == 1 and home["bundle_placed"], (name, home)
        assert home["after"].get("engine_node") == 1, (name, "on the new engine node", home)
        assert home["away_groups"] == ["REMOVED"] and home["anywhere"] == 0, (name, home)
        assert home["restarts"] == 1 and home["version"] == 3, (name, "a move is no restart")
        assert home["received"] == [HOME_TENSORS], (name, "the moved engine has the weights")
