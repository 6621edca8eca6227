"""Training on several processes: torch.distributed (gloo on CPU), started through torchrun's
launcher. Two processes with half of each batch train as one process with all of it; the
cache is scored by both; a rank killed mid-run stops the whole run in one line, and
`rvctl resume` finishes it exactly as an uninterrupted two-process run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from rollverify.config import ConfigError, load_config
from rollverify.experiments.compare import compare
from rollverify.experiments.sweep import trial_resources
from rollverify.infra.kill_points import ENVIRONMENT
from rollverify.tracking.metric_names import CACHE_TOKENS_VERIFIED, SYNC_LOGPROB_GAP
from rollverify.training.checkpoint.files import latest
from rollverify.training.run import train
from tests.runs import comparable, history, metric_history, tiny, tiny_file
from tests.sockets import beyond_loopback, listening, tree

pytestmark = pytest.mark.slow

RVCTL = [sys.executable, "-m", "rvctl.app"]
TWO = {"train.processes": 2, "train.checkpoint_every": 1}


def final_weights(run_dir) -> dict[str, torch.Tensor]:
    return latest(Path(run_dir) / "checkpoints").tensors["model"]


def modeled(metrics: dict) -> dict:
    return {k: v for k, v in comparable(metrics).items() if k.startswith("modeled_")}


def unmodeled(metrics: dict) -> dict:
    """What the two layouts must share: all but the GPU cost model's figures, which price the
    run's own devices (1 or 2 trainer GPUs)."""
    return {k: v for k, v in comparable(metrics).items() if not k.startswith("modeled_")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The tiny rollverify run on one process (train) and on two: a child of compare, called
    from a thread other than the main one, as a sweep's Ray trial calls it (no signal
    handlers there)."""
    root = tmp_path_factory.mktemp("distributed")
    one = train(tiny(root / "one", "rollverify", **{"train.checkpoint_every": 1}))
    comparisons = []
    config = tiny(root / "two", "rollverify", **TWO)
    thread = threading.Thread(target=lambda: comparisons.append(compare(config, ["rollverify"])))
    thread.start()
    thread.join()
    (two,) = comparisons[0].summaries
    return one, two


def test_two_processes_with_half_the_batch_each_train_as_one(runs):
    one, two = runs
    a, b = final_weights(one.run_dir), final_weights(two.run_dir)
    assert a.keys() == b.keys()
    gap = max((a[name] - b[name]).abs().max().item() for name in a)
    assert gap < 1e-6, gap  # gradients averaged over the ranks: the same update
    assert gap > 0  # (two processes sum in another order: not the same run read twice)
    one_metrics, two_metrics = history(one), history(two)
    assert unmodeled(two_metrics).keys() == unmodeled(one_metrics).keys()
    for name, steps in unmodeled(one_metrics).items():
        assert two_metrics[name] == pytest.approx(steps, rel=1e-4, abs=1e-6), name
    # the cache was verified under the new weights, each rank scoring a part of it
    assert max(two_metrics[CACHE_TOKENS_VERIFIED].values()) > 0


def test_the_ledger_and_cost_model_count_the_processes_the_run_holds(runs):
    one, two = runs
    ledgers = [json.loads((Path(r.run_dir) / "ledger.json").read_text()) for r in runs]
    assert [ledger["layout"]["trainer"] for ledger in ledgers] == [1, 2]
    # the trainer's modeled work is split over its GPUs: half the seconds on two
    one_modeled, two_modeled = modeled(history(one)), modeled(history(two))
    for step, seconds in one_modeled["modeled_train_seconds"].items():
        assert two_modeled["modeled_train_seconds"][step] == pytest.approx(seconds / 2)


@pytest.mark.long  # 74 s: make test-all (make test was at 10 minutes, 2026-12-06)
def test_a_stopped_then_killed_run_resumes_to_the_uninterrupted_weights(runs, tmp_path):
    """Ctrl-C reaches the workers once (torchrun forwards it): every rank stops after the same
    step, with a checkpoint. Resumed, rank 1 is killed: the whole run stops, one line names
    the rank. Resumed again, it ends exactly as an uninterrupted two-process run."""
    _, two = runs
    config = tiny_file(tmp_path / "tiny.yaml", **{"train.method": "rollverify", **TWO})
    command = [*RVCTL, "train", "--config", str(config), "--output", str(tmp_path / "runs")]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    sockets: set = set()  # of the launcher and its ranks, once they train (every store is up)
    while time.monotonic() < deadline and process.poll() is None:
        progress = list((tmp_path / "runs").glob("rollverify-*/progress.jsonl"))
        if progress and not sockets:
            sockets = listening(tree(process.pid))
        if progress and '"step": 1,' in progress[0].read_text():
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=240)
    assert process.returncode == 130, stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").glob("rollverify-*")
    assert f"continue with: rvctl resume {run_dir}" in stderr, stderr[-3000:]
    assert "Traceback" not in stderr
    assert 1 <= latest(run_dir / "checkpoints").step < 3  # after the step in progress
    # torchrun's stores and the ranks' gloo pairs listen on loopback only (issue 19)
    assert sockets and not beyond_loopback(sockets), beyond_loopback(sockets)

    killed = subprocess.run(
        [*RVCTL, "resume", str(run_dir)],
        capture_output=True,
        text=True,
        env=os.environ | {ENVIRONMENT: "train:3@1"},  # rank 1, after its last update
        timeout=300,
    )
    assert killed.returncode == 1, killed.stderr[-3000:]
    assert "Traceback" not in killed.stderr
    errors = [line for line in killed.stderr.splitlines() if "error:" in line]
    assert errors == [
        f"error: rank 1 was killed (SIGKILL); every rank was stopped; rvctl resume {run_dir} "
        "continues from step 2"
    ], killed.stderr[-3000:]

    resumed = subprocess.run(
        [*RVCTL, "resume", str(run_dir)], capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = final_weights(two.run_dir), final_weights(run_dir)
    assert all(torch.equal(a[name], b[name]) for name in a)  # exactly: same ranks, same order
    saved = json.loads((run_dir / "mlflow.json").read_text())
    after = unmodeled(metric_history(saved["tracking_uri"], saved["run_id"]))
    uninterrupted = unmodeled(history(two))
    # a stop before the last step skips that step's weight sync (the resumed run syncs first)
    synced = after.pop(SYNC_LOGPROB_GAP)
    assert synced.items() <= uninterrupted.pop(SYNC_LOGPROB_GAP).items()
    assert after == uninterrupted


def test_the_launchers_multi_node_form_trains_the_same_run(runs, tmp_path):
    """docs/distributed.md's multi-node form: one torchrun per node, meeting over c10d
    rendezvous, each running the worker entry point on the config (here two "nodes" of one
    process on this machine: which one serves the rendezvous is said, as both match the
    endpoint's address). The run is rvctl's own two-process run, exactly."""
    _, two = runs
    config = tiny_file(tmp_path / "tiny.yaml", **{"train.method": "rollverify", **TWO})
    endpoint = f"127.0.0.1:{_free_port()}"
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
            + ["--nproc-per-node", "1", "--node-rank", str(node), "--rdzv-backend", "c10d"]
            + ["--rdzv-endpoint", endpoint, "--rdzv-conf", f"is_host={node == 0}"]
            + ["-m", "rollverify.training.worker"]
            + ["--config", str(config), "--output", str(tmp_path / "runs")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ | {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"},
        )
        for node in (0, 1)
    ]
    outputs = [node.communicate(timeout=300) for node in nodes]
    codes = [node.returncode for node in nodes]
    errors = [f"node {i}: {stderr[-2000:]}" for i, (_, stderr) in enumerate(outputs)]
    assert codes == [0, 0], "\n".join(errors)
    (run_dir,) = (tmp_path / "runs").glob("rollverify-*")  # one run, made by rank 0
    a, b = final_weights(two.run_dir), final_weights(run_dir)
    assert all(torch.equal(a[name], b[name]) for name in a)
    saved = json.loads((run_dir / "mlflow.json").read_text())
    assert unmodeled(metric_history(saved["tracking_uri"], saved["run_id"])) == unmodeled(
        history(two)
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_processes_must_share_each_step_evenly(tmp_path):
    with pytest.raises(ConfigError, match=r"train.processes: must divide the step's batch"):
        tiny(tmp_path, "grpo", **{"train.processes": 3})
    with pytest.raises(ConfigError, match=r"train.micro_batch_size: must divide each process"):
        tiny(tmp_path, "grpo", **{"train.processes": 2, "train.micro_batch_size": 4})
    with pytest.raises(ConfigError, match=r"train.devices: renamed train.processes"):
        load_config(overrides={"train.devices": 2})
    result = subprocess.run(
        [*RVCTL, "train", "--processes", "3", "--output", str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: train.processes: must divide")
    assert not (tmp_path / "out").exists()
    # a sweep checks it before Ray starts; each of its trials holds its processes' CPUs
    result = subprocess.run(
        [*RVCTL, "sweep", "ds", "--ds", "0.01", "--processes", "3", "--output", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: train.processes: must divide"), result.stderr
    two = tiny(tmp_path, "grpo", **{"train.processes": 2, "train.threads": 1})
    assert trial_resources(two) == {"cpu": 2, "gpu": 0}


def test_the_rank_named_is_the_one_that_failed_first_of_its_own():
    """A rank killed from outside is the cause, even when a rank that lost its connection to
    it reported earlier; ranks torchrun stopped (SIGTERM) or that stopped on request never
    are."""
    from types import SimpleNamespace as Failure

    from rollverify.training.launch import _cause

    lost = Failure(exitcode=1, timestamp=10)
    killed = Failure(exitcode=-9, timestamp=11)
    stopped = Failure(exitcode=-15, timestamp=9)
    assert _cause({0: lost, 1: killed, 2: stopped}) == (1, killed)
    raised = Failure(exitcode=1, timestamp=12)
    assert _cause({0: raised, 1: Failure(exitcode=1, timestamp=13), 2: stopped}) == (0, raised)
    assert _cause({3: stopped}) == (3, stopped)
