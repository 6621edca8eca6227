"""rvctl train on vLLM with its engine on the second of two Ray nodes (benchmarks/ray_nodes.py),
for the lost-node tests (tests/test_node_loss.py) and benchmarks/node_loss_bench.py: the run,
the random moment of the loss, and which phase it met."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
from pathlib import Path

import psutil

from benchmarks.ray_nodes import ENGINE_RESOURCE, Cluster
from benchmarks.tiny_run import tiny_file

# A step is ~0.5 s here and a killed raylet's actors answer for ~3 s more: the run must go on
# for long enough after the kill to meet the loss (4 steps or more after the last kill).
STEPS, KILLED_AFTER, LAST_KILL = 12, 2, 7
# Ray notices a lost node after 3 health checks this far apart (its default: 5 x 3 s, past a
# whole run here): so the loss is met in the phase the kill came in, not at the run's end
HEALTH_CHECK_MS = 200
MODES = {
    "partial": {"train.method": "partial"},
    "async": {"train.method": "rollverify", "rollout.mode": "async", "rollout.eta": 2},
}
LOST = "vllm: engine 0's node"  # the one line a lost node's engine logs


def sidecars(node: subprocess.Popen) -> list[str]:
    """The vLLM sidecars (Ray actors) running on a node: under its `ray start`."""
    found = []
    with contextlib.suppress(psutil.NoSuchProcess):
        for process in psutil.Process(node.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                title = process.name() + " " + " ".join(process.cmdline())
                if "VLLMSidecar" in title:
                    found.append(title[:200])
    return found


def train_on_engine_node(
    cluster: Cluster, tmp_path: Path, mode: str, **more: object
) -> tuple[subprocess.Popen, Path]:
    settings = MODES[mode] | {"rollout.engine": "vllm", "train.steps": STEPS}
    settings |= {"train.checkpoint_every": 1, "task.max_steps": 32}  # long chains: in flight
    settings |= {"train.eval_every": 3}  # an evaluation the kill may meet
    settings |= {"vllm.ray_address": cluster.address, "vllm.node_resource": ENGINE_RESOURCE}
    settings |= {"vllm.node_lost_wait_seconds": 2.0}  # no other engine node: then the head
    config = tiny_file(tmp_path / "tiny.yaml", **(settings | more))
    command = [sys.executable, "-m", "rvctl.app", "train", "--config", str(config)]
    command += ["--output", str(tmp_path / "runs")]
    stderr = tmp_path / "stderr"
    env = cluster.env | {"ROLLVERIFY_PHASES": str(tmp_path / "phases")}
    with stderr.open("w") as err:
        process = subprocess.Popen(
            cluster.command(*command), stdout=subprocess.DEVNULL, stderr=err, env=env
        )
    return process, stderr


def moment(mode: str) -> tuple[int, int, float]:
    """(seed, the step after whose line the kill comes, the delay after it): drawn from
    NODE_LOSS_SEED, else a fresh seed, printed so a failure can be repeated."""
    seed = int(os.environ.get("NODE_LOSS_SEED", random.randrange(10**6)))
    draw = random.Random(f"{seed}-{mode}")
    after, delay = draw.randint(1, LAST_KILL), draw.uniform(0.0, 1.0)  # (a step: ~0.3-1 s)
    print(f"NODE_LOSS_SEED={seed}: {mode}, killed {delay:.2f} s after step {after}'s line")
    return seed, after, delay


def phase_met(tmp_path: Path, killed_at: float) -> str:
    """The phase the run was in at `killed_at` (time.time()): the last one begun before it."""
    marks = [line.split() for line in (tmp_path / "phases").read_text().splitlines()]
    begun = [(float(t), " ".join(rest[:-1]), rest[-1]) for t, *rest in marks]
    t, phase, step = max((m for m in begun if m[0] <= killed_at), default=(0, "setup", "0"))
    return f"{phase} (step {step})"
