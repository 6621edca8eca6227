"""A sweep on an existing two-node cluster (`rvctl sweep ... --address`) losing its worker node
mid-sweep: the trial there resumes from its run's checkpoint, no finished point is trained
twice. The long tier (docs/testing.md): ~2 minutes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from benchmarks.ray_nodes import namespace_available, two_nodes
from rollverify.tracking.tracker import child_runs
from tests.polling import wait_until
from tests.runs import tiny_file
from tests.sockets import process_name, tree

pytestmark = [
    pytest.mark.slow,
    pytest.mark.ray,
    pytest.mark.long,
    pytest.mark.skipif(not namespace_available(), reason="needs `ip netns` (root)"),
]

STEPS = 40  # ~0.4 s a step: a trial outlasts the kill and Ray's notice of it


def _trials(node) -> list[str]:
    """The Tune trials (function trainables, Ray actors) running on a node."""
    return [process_name(p) for p in tree(node.pid) if "ImplicitFunc" in process_name(p)]


def _checkpoints(output: Path) -> list[Path]:
    return list(output.glob("sweep-*/*/checkpoints/step-*"))


def test_a_sweep_on_the_cluster_survives_losing_a_worker_node(tmp_path):
    """Two grid points, a trial on each node (a CPU each); once both train and one has a
    checkpoint, the worker node's raylet is SIGKILLed. The sweep says so in one line, runs the
    lost trial again (on the head, once the other is done), from its run's last checkpoint:
    it exits 0, each point has one run folder and one FINISHED MLflow run with every step
    logged once, and the point that finished on the head was not trained again."""
    config = tiny_file(tmp_path / "tiny.yaml", **{"train.checkpoint_every": 4})
    output = tmp_path / "sweep"
    command = [sys.executable, "-m", "rvctl.app", "sweep", "ds", "--ds", "0.01,0.02"]
    command += ["--config", str(config), "--steps", str(STEPS), "--output", str(output)]
    command += ["-f", "json"]  # its table, printed once the sweep ends (on a cluster too)
    with two_nodes(tmp_path) as cluster:
        stderr, stdout = tmp_path / "stderr", tmp_path / "stdout"
        sweep = subprocess.Popen(
            cluster.command(*command, "--address", cluster.address),
            stdout=stdout.open("w"),
            stderr=stderr.open("w"),
            env=cluster.env,
        )
        try:
            both = wait_until(
                lambda: (
                    (_trials(cluster.worker) and _trials(cluster.head) and _checkpoints(output))
                    or sweep.poll() is not None
                ),
                timeout=300,
            )
            assert both and sweep.poll() is None, stderr.read_text()[-3000:]
            cluster.kill_raylet(cluster.worker)
            sweep.wait(timeout=500)
        finally:
            if sweep.poll() is None:
                sweep.kill()
    errors = stderr.read_text()
    assert sweep.returncode == 0, errors[-3000:]
    assert len([line for line in errors.splitlines() if "lost with their node" in line]) == 1
    table = json.loads(stdout.read_text())
    assert sorted(row["ds"] for row in table) == [0.01, 0.02], stdout.read_text()[-2000:]

    (parent_file,) = output.glob("sweep-*/parent.json")
    parent = json.loads(parent_file.read_text())
    runs = child_runs(MlflowClient(parent["tracking_uri"]), parent["run_id"])
    assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED"]
    folders = sorted(p.parent for p in parent_file.parent.glob("*/config.yaml"))
    points = [yaml.safe_load((f / "config.yaml").read_text())["verify"]["ds"] for f in folders]
    assert sorted(points) == [0.01, 0.02], "one run folder a point"
    client = MlflowClient(parent["tracking_uri"])
    for run in runs:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "reward_mean")]
        assert sorted(steps) == list(range(1, STEPS + 1)), f"each step once: {steps}"
