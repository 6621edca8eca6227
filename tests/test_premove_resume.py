"""A checkpoint written by the code before issue 31's move (commit f27d18b, the flat layout)
resumes with the code after it and ends where the old code's uninterrupted run ended.

The fixture (tests/fixtures/premove_checkpoint/, its README says how it was made) is a run
folder of the tiny rollverify run as the old code left it after step 1: its config, MLflow
record, trace and checkpoint step-000001 (weights, AdamW state, RNG, the partial-rollout cache
holding unfinished trajectories, ledger, monitor), byte for byte. expected.json holds what the
old code's run of the same config that never stopped logged for steps 2 and 3 (timings aside;
metrics added since, such as staleness_max, are not in it) and digests of its last checkpoint.
Resumed here, the run must log the same values exactly and end with the same tensors bit for
bit and the same state, as tests/test_resume.py asks of a run killed and resumed with one
version of the code.

A change meant to alter what a run computes fails the second test by design: keep the
checkpoint (it is the old code's) and take expected.json's numbers from this fixture resumed by
the changed code, saying so in the README.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from rollverify.rollout.trajectory import TrajectoryCache
from rollverify.tracking.tracker import MLflowTracker
from rollverify.training.checkpoint.files import Checkpoint, folder_for, latest
from rollverify.training.run import resume
from tests.runs import comparable, metric_history, unfinished

# One resume of 2 steps of the tiny run: ~9 s on 2 shared cores (with imports ~25 s).
pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).parent / "fixtures" / "premove_checkpoint"
TENSOR_GROUPS = ("model", "optimizer", "cache", "rng")  # bit for bit
STATE_PARTS = ("cache", "answers", "task", "monitor", "rollout_counts")  # equal as JSON
LEDGER_PARTS = ("tokens", "modeled_seconds")  # the ledger's wall-clock seconds differ


def tensor_digest(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous().cpu()
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}\n".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def summary_of(checkpoint: Checkpoint) -> dict:
    """What a checkpoint must share with the old code's: its step, tensor digests, state."""
    return {
        "step": checkpoint.step,
        "tensors": {group: tensor_digest(checkpoint.tensors[group]) for group in TENSOR_GROUPS},
        "state": {part: checkpoint.state[part] for part in STATE_PARTS},
        "ledger": {part: checkpoint.state["ledger"][part] for part in LEDGER_PARTS},
    }


def logged_after(tracking_uri: str, run_id: str, step: int) -> dict[str, dict[str, float]]:
    """Every metric a run logged after `step`, timings aside: name -> {step (text): value}."""
    history = comparable(metric_history(tracking_uri, run_id))
    after = {
        name: {str(s): value for s, value in sorted(values.items()) if s > step}
        for name, values in sorted(history.items())
    }
    return {name: values for name, values in after.items() if values}


def expected() -> dict:
    return json.loads((FIXTURE / "expected.json").read_text())


def test_the_fixture_is_the_old_codes_step_1_checkpoint_with_unfinished_trajectories():
    (run_dir,) = (path.parent for path in (FIXTURE / "run").glob("*/config.yaml"))
    checkpoint = latest(run_dir / "checkpoints")
    assert checkpoint is not None and checkpoint.step == expected()["resumed_from"] == 1
    cache = TrajectoryCache.from_tensors(checkpoint.tensors["cache"], checkpoint.state["cache"])
    assert unfinished(cache), "the cache must hold trajectories to resume"
    assert checkpoint.state["config"]["train"]["method"] == "rollverify"
    # safetensors and JSON only: no file a loader would unpickle
    for path in checkpoint.folder.iterdir():
        assert path.suffix in (".safetensors", ".json"), path.name
        assert not path.read_bytes().startswith(b"\x80"), f"{path.name} looks like a pickle"


# expected.json is bit for bit, and bfloat16 kernels differ between CPUs: its numbers are the
# machine's that wrote it (measured: on an AMD EPYC with avx512_bf16, the resumed run's step-2
# OPS differs in the 6th digit, its step-3 cache OPS by 0.7%). Elsewhere they would have to be
# made again by the old code resuming this checkpoint there (README.md).
FIXTURE_CPU = "Intel(R) Xeon(R) Processor"


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


@pytest.mark.skipif(_cpu() != FIXTURE_CPU, reason=f"expected.json is {FIXTURE_CPU}'s, bit for bit")
def test_a_checkpoint_of_the_code_before_the_move_resumes_to_the_same_end(tmp_path, monkeypatch):
    output = tmp_path / "run"
    shutil.copytree(FIXTURE / "run", output)
    # The MLflow run the checkpoint names lived in a store on the machine that wrote it (an
    # absolute sqlite path there); a fresh run in a store here stands in for it, so the files
    # of the checkpoint stay as the old code wrote them.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("premove", artifact_location=str(tmp_path / "mlart"))
    run_id = client.create_run(experiment).info.run_id
    attach = MLflowTracker.attach.__func__
    monkeypatch.setattr(
        MLflowTracker,
        "attach",
        classmethod(lambda cls, _uri, _run_id, spool=None: attach(cls, uri, run_id, spool)),
    )

    summary = resume(output)

    want = expected()
    assert summary.run_id == run_id
    logged = logged_after(uri, run_id, want["resumed_from"])
    assert want["metrics"].keys() <= logged.keys()  # (metrics added since are not compared)
    assert {name: logged[name] for name in want["metrics"]} == want["metrics"]
    run_dir = Path(summary.run_dir)
    final = latest(run_dir / "checkpoints")
    assert final is not None and final.folder == folder_for(run_dir / "checkpoints", 3)
    assert summary_of(final) == want["final_checkpoint"]
