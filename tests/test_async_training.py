"""Asynchronous training in the loop (rollout.mode async, rollverify/rollout/async_rollout.py) on
the hf engine in lock-step: eta 0 is synchronous grpo, the staleness bound holds on real
tokens, updates land in flight with each token keeping its version, verification truncates and
regenerates before a trajectory trains, and a run killed in generation or in training resumes
bit for bit."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from rollverify.config import ConfigError, load_config
from rollverify.rollout.async_rollout import AsyncState
from rollverify.rollout.engine_thread import EngineThread
from rollverify.rollout.engines.hf_engine import HFEngine
from rollverify.rollout.engines.protocol import SyncCheckError
from rollverify.rollout.schedules import PromptGroup
from rollverify.training.checkpoint.files import folder_for, latest
from rollverify.training.checkpoint.files import load as load_checkpoint
from rollverify.training.parts import make_engine
from rollverify.training.run import resume, train
from tests.cli import run_cli
from tests.runs import (
    TINY,
    assert_same_weights_and_cache,
    groups_in_play,
    history,
    metric_history,
    stopped_after,
    tiny,
    tiny_file,
)
from tests.tiny import EOS, PAD, prompts, random_model


def final_checkpoint(summary):
    return latest(Path(summary.run_dir) / "checkpoints")


def without_timings(metrics: dict) -> dict:
    """Wall-clock figures differ between any two runs (cost_*: measured seconds priced)."""
    timed = ("seconds", "cost_", "trl/step_time")
    return {k: v for k, v in metrics.items() if not any(t in k for t in timed)}


def test_eta_0_trains_exactly_what_synchronous_grpo_trains(tmp_path):
    """The same seed: every metric but the timings, and the final weights, bit for bit."""
    sync = train(tiny(tmp_path / "sync", "grpo"))
    eta0 = train(tiny(tmp_path / "async", "grpo", **{"rollout.mode": "async", "rollout.eta": 0}))
    assert without_timings(history(sync)) == without_timings(history(eta0))
    ours, theirs = final_checkpoint(eta0), final_checkpoint(sync)
    for name, tensor in theirs.tensors["model"].items():
        assert torch.equal(ours.tensors["model"][name], tensor), name


@pytest.mark.parametrize("eta", [1, 2])
def test_no_trained_token_lags_more_than_eta_and_tokens_keep_the_version_that_sampled_them(
    tmp_path, eta
):
    summary = train(
        tiny(
            tmp_path, "partial",
            **{"rollout.mode": "async", "rollout.eta": eta, "train.steps": 5,
               "train.checkpoint_every": 1, "train.keep_checkpoints": 5},
        )
    )  # fmt: skip
    metrics = history(summary)
    assert max(metrics["staleness_max"].values()) == eta  # reached: async runs ahead
    # The sequences in flight after each step (its checkpoint holds them), their versions in
    # the order they were sampled. At eta 2 some have run through an update already (at eta 1
    # such a one is always trained first: its group is due).
    spanning = 0
    for step in range(1, 6):
        checkpoint = load_checkpoint(folder_for(Path(summary.run_dir) / "checkpoints", step))
        # nothing lost: every group in play has its G samples there (an evaluation between
        # steps, which uses the engine too, leaves them be)
        groups = sorted(r["group_id"] for r in checkpoint.state["cache"])
        in_play = checkpoint.state["rollout_counts"]["async"]["start_versions"]
        assert groups == sorted(2 * [int(g) for g in in_play]), step
        cache = checkpoint.tensors
        for versions in cache["cache"]["versions"].split(cache["cache"]["token_lengths"].tolist()):
            assert versions.tolist() == sorted(versions.tolist())
            spanning += len(set(versions.tolist())) > 1
    assert (spanning > 0) == (eta == 2)


def test_verification_truncates_stale_trajectories_before_they_train_and_regenerates_them(tmp_path):
    summary = train(
        tiny(
            tmp_path, "rollverify", **{"rollout.mode": "async", "rollout.eta": 2, "train.steps": 4}
        )
    )
    metrics = history(summary)
    assert min(metrics["acceptance_rate"].values()) < 1
    assert max(metrics["tokens_regenerated_total"].values()) > 0
    assert max(metrics["staleness_max"].values()) <= 2


def test_async_refuses_what_it_does_not_combine_with_yet(tmp_path):
    for settings, named in [
        ({"rollout.engine": "vllm", "rollout.keep_kv": True}, "rollout.keep_kv"),
        ({"train.updates_per_rollout": 2}, "train.updates_per_rollout"),
        ({"rollout.max_staleness": 1}, "rollout.max_staleness"),
    ]:
        overrides = {"rollout.mode": "async", "output": str(tmp_path)} | settings
        with pytest.raises(ConfigError, match=named):
            load_config(overrides=overrides)
    load_config(overrides={"rollout.mode": "async", "rollout.engine": "vllm"})  # recomputes KV


ASYNC = {
    "train.method": "rollverify",
    "rollout.mode": "async",
    "rollout.eta": 2,
    "train.steps": 6,
    "train.checkpoint_every": 2,
}


@pytest.mark.slow
def test_killed_in_generation_and_in_training_resumes_bit_for_bit(tmp_path):
    """SIGKILLed mid-rollout of step 3 and after the optimizer step of step 5, resumed each
    time from the step-2 and step-4 checkpoints (their sequences in flight and groups waiting
    held in them), it ends where the run that never stopped ends."""
    reference = train(
        load_config(tiny_file(tmp_path / "ref.yaml", **ASYNC), {"output": str(tmp_path / "ref")})
    )
    output = tmp_path / "runs"
    config = str(tiny_file(tmp_path / "tiny.yaml", **ASYNC))
    first = run_cli("train", "--config", config, "--output", str(output), kill_at="rollout:3#10")
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    (run_dir,) = output.glob("*-s0-*")
    assert latest(run_dir / "checkpoints").step == 2
    second = run_cli("resume", str(run_dir), kill_at="train:5")
    assert second.returncode == -signal.SIGKILL, second.stderr[-2000:]
    assert latest(run_dir / "checkpoints").step == 4
    final = run_cli("resume", str(run_dir))
    assert final.returncode == 0, final.stderr[-3000:]

    ours, theirs = latest(run_dir / "checkpoints"), final_checkpoint(reference)
    assert ours.step == theirs.step == 6
    assert len(theirs.state["cache"]) > 0, "the test must have sequences in flight to lose"
    for group in ("model", "optimizer", "cache"):
        for name, tensor in theirs.tensors[group].items():
            assert torch.equal(ours.tensors[group][name], tensor), f"{group}.{name}"
    for part in ("cache", "answers", "rollout_counts", "task", "monitor"):
        assert ours.state[part] == theirs.state[part], part


# -- the engine in a thread of its own (rollout.lockstep false) ---------------------------------

THREADED = {"rollout.mode": "async", "rollout.lockstep": False}


def test_the_engine_thread_generates_beside_the_trainer_within_the_bound(tmp_path):
    """Updates land whenever they come; the bound holds, the probe check passes in the engine
    thread, nothing is lost between steps, and the ledger books the two sides' overlap."""
    settings = THREADED | {"rollout.eta": 2, "train.steps": 6}
    settings |= {"train.checkpoint_every": 1, "train.keep_checkpoints": 6}
    summary = train(tiny(tmp_path, "rollverify", **settings))
    metrics = history(summary)
    assert max(metrics["staleness_max"].values()) <= 2
    assert set(metrics["sync_logprob_gap"].values()) == {0.0}
    run_dir = Path(summary.run_dir)
    for step in range(1, 7):
        checkpoint = load_checkpoint(folder_for(run_dir / "checkpoints", step))
        groups = sorted(r["group_id"] for r in checkpoint.state["cache"])
        in_play = checkpoint.state["rollout_counts"]["async"]["start_versions"]
        assert groups == sorted(2 * [int(g) for g in in_play]), step
    ledger = json.loads((run_dir / "ledger.json").read_text())
    overlap = ledger["overlap"]
    assert 0 < overlap["both"] <= min(overlap["engines"], overlap["trainer"]) <= overlap["wall"]
    assert ledger["layout"] == {"trainer": 1, "engines": 1}
    held = sum(v for k, v in ledger["device_seconds"].items() if k != "measure")
    assert held == pytest.approx(2 * ledger["wall_seconds"])
    assert 0 <= metrics["cost_engine_idle_share"][6] < 1


class Prompts:
    def __init__(self):
        self.groups = 0

    def next_group(self) -> PromptGroup:
        self.groups += 1
        return PromptGroup(self.groups, prompts(1, seed=self.groups)[0], "0")


def test_an_error_in_the_engine_thread_reaches_the_trainer():
    """A failed probe check after an update, in the engine's thread: the trainer's next call
    raises it (a sync that went wrong must stop the run, not hang it)."""
    model = random_model(seed=0, eos_bias=-1.0)
    engine = HFEngine(model, slots=4, max_new_tokens=12, eos_token_id=EOS, pad_token_id=PAD)
    thread = EngineThread(
        engine, Prompts(), AsyncState(), batch_groups=1, group_size=2, eta=1, keep_kv=False
    )
    try:
        result = thread.next_batch(verify=None, admit_eta=1, should_stop=lambda: False)
        assert len(result.groups) == 1 and all(t.finished for t in result.trajectories())

        def failed_check(engine):
            raise SyncCheckError("weight sync check failed after step 1")

        thread.send_weights(list(model.state_dict().items()), 1, failed_check)
        with pytest.raises(SyncCheckError, match="step 1"):
            for _ in range(100):
                thread.next_batch(verify=None, admit_eta=1, should_stop=lambda: False)
    finally:
        thread.close()


class NeverSteps(EngineThread):
    """An engine thread parked from the start: what a hold does is the trainer's alone."""

    def _run(self) -> None:
        with self._lock:
            self._parked = True
            self._lock.notify_all()


def test_a_hold_lands_the_updates_on_their_way_before_the_engine_is_used():
    """An evaluation right after an update (the update only queued: the engine thread had no
    step boundary yet) runs under the new weights, as it is logged under the new version."""
    model, new = random_model(seed=0), random_model(seed=1)
    engine = HFEngine(model, slots=4, max_new_tokens=12, eos_token_id=EOS, pad_token_id=PAD)
    thread = NeverSteps(
        engine, Prompts(), AsyncState(), batch_groups=1, group_size=2, eta=1, keep_kv=False
    )
    thread.send_weights(list(new.state_dict().items()), 1, lambda engine: 0.25)
    with thread.held():
        assert engine.version == 1 and thread.last_gap == 0.25
        assert torch.equal(engine.model.lm_head.weight, new.lm_head.weight)
    thread.close()


@pytest.mark.slow
def test_a_threaded_run_killed_in_training_resumes_with_nothing_lost(tmp_path):
    """Not bit for bit (updates land when they come), but from its checkpoint every group in
    play, with each sequence's tokens, versions and log-probs, continues to the end."""
    settings = THREADED | {"train.method": "rollverify", "rollout.eta": 2, "train.steps": 5}
    config = str(tiny_file(tmp_path / "tiny.yaml", **settings, **{"train.checkpoint_every": 2}))
    output = tmp_path / "runs"
    killed = run_cli("train", "--config", config, "--output", str(output), kill_at="train:3")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (run_dir,) = output.glob("*-s0-*")
    saved = latest(run_dir / "checkpoints")
    assert saved.step == 2 and len(saved.state["cache"]) > 0
    final = run_cli("resume", str(run_dir))
    assert final.returncode == 0, final.stderr[-3000:]
    end = latest(run_dir / "checkpoints")
    assert end.step == 5
    groups = sorted(r["group_id"] for r in end.state["cache"])
    in_play = end.state["rollout_counts"]["async"]["start_versions"]
    assert groups == sorted(2 * [int(g) for g in in_play])
    # the groups in play at step 2 were trained after the resume, or are still in play
    assert min(int(g) for g in in_play) > min(r["group_id"] for r in saved.state["cache"])


@pytest.mark.slow
@pytest.mark.parametrize("lockstep", [True, False], ids=["lockstep", "engine-thread"])
@pytest.mark.parametrize("point", ["weights-in-flight", "regenerating"])
def test_killed_where_asynchronous_work_is_in_flight_resumes_with_nothing_lost(
    tmp_path, lockstep, point
):
    """SIGKILLed as an update is on its way to the engine (its sequences stopped for it, no
    tensor loaded) or as sequences verification cut are regenerated, from step 3 on; resumed
    from the step-2 checkpoint: in lock-step it ends where the run that never stopped ends, bit
    for bit; with the engine in its own thread every group in play at the checkpoint is
    trained once or still in play at the end, with all its members there."""
    settings = ASYNC | {"rollout.lockstep": lockstep}
    config = str(tiny_file(tmp_path / "tiny.yaml", **settings))
    output = tmp_path / "runs"
    killed = run_cli("train", "--config", config, "--output", str(output), kill_at=f"{point}:3")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (run_dir,) = output.glob("*-s0-*")
    saved = latest(run_dir / "checkpoints")
    assert saved.step in (2, 4) and len(saved.state["cache"]) > 0
    final = run_cli("resume", str(run_dir))
    assert final.returncode == 0, final.stderr[-3000:]
    end = latest(run_dir / "checkpoints")
    assert end.step == ASYNC["train.steps"]
    logged = metric_history(f"sqlite:///{output / 'mlflow.db'}", end.state["mlflow"]["run_id"])
    assert sorted(logged["reward_mean"]) == list(range(1, end.step + 1))
    if lockstep:  # bit for bit: weights, optimizer, cache, counters and every metric
        reference = train(load_config(config, {"output": str(tmp_path / "ref")}))
        theirs = final_checkpoint(reference)
        for group in ("model", "optimizer", "cache"):
            for name, tensor in theirs.tensors[group].items():
                assert torch.equal(end.tensors[group][name], tensor), f"{group}.{name}"
        for part in ("cache", "answers", "rollout_counts", "task", "monitor"):
            assert end.state[part] == theirs.state[part], part
        assert without_timings(logged) == without_timings(history(reference))
        return
    counts = end.state["rollout_counts"]["async"]
    in_play = [int(g) for g in counts["start_versions"]]
    assert sorted(r["group_id"] for r in end.state["cache"]) == sorted(2 * in_play)
    batch_groups = TINY["rollout.batch_groups"]
    assert counts["started"] == end.step * batch_groups + len(in_play), "each group trained once"


@pytest.mark.parametrize("lockstep", [True, False])
def test_a_stop_keeps_the_sequences_in_flight_and_resume_continues_them(tmp_path, lockstep):
    """SIGTERM after step 2: the run stops at its next safe point with the engine's sequences
    in its checkpoint, and `resume` ends the run; in lock-step where the run that never
    stopped ends, bit for bit."""
    settings = {"rollout.mode": "async", "rollout.eta": 2, "rollout.lockstep": lockstep}
    settings |= {"train.steps": 4, "train.checkpoint_every": 4}
    run_dir = stopped_after(tiny(tmp_path / "stopped", "rollverify", **settings), step=2)
    saved = latest(run_dir / "checkpoints")
    assert saved.step in (2, 3) and len(saved.state["cache"]) > 0
    groups_in_play(saved, group_size=2)
    assert resume(run_dir).steps == 4
    if lockstep:
        reference = train(tiny(tmp_path / "reference", "rollverify", **settings))
        assert_same_weights_and_cache(latest(run_dir / "checkpoints"), final_checkpoint(reference))


def test_a_peer_correction_trains_asynchronously_too(tmp_path):
    """tis on pi_old recomputed: its token weights reach the loss in async mode as in sync."""
    summary = train(tiny(tmp_path, "tis", **{"rollout.mode": "async", "rollout.eta": 2}))
    metrics = history(summary)
    assert "trl/correction/token_share" in metrics and max(metrics["staleness_max"].values()) > 0


# -- one thread at a time inside the engine ------------------------------------------------------


class TwoThreadsInside(AssertionError):
    pass


class OneThreadOnly:
    """An engine that fails when a thread enters it while another is inside (as vLLM's sidecar
    actors must not be called from two threads at once): every attribute read, call or write
    of the wrapped engine is an entry. Its polls dwell a little, so that a trainer reading the
    engine beside its thread meets it inside."""

    def __init__(self, engine, dwell: float = 0.005) -> None:
        state = {"_engine": engine, "_dwell": dwell, "_guard": threading.Lock()}
        state |= {"_owner": None, "_depth": 0, "clashes": [], "threads": set()}
        for name, value in state.items():
            object.__setattr__(self, name, value)

    @contextlib.contextmanager
    def _entered(self, name: str):
        me = threading.current_thread().name
        with self._guard:
            if self._owner not in (None, me):
                self.clashes.append((name, me, self._owner))
                raise TwoThreadsInside(
                    f"{me} entered the engine ({name}) while {self._owner} was in it"
                )
            object.__setattr__(self, "_owner", me)
            object.__setattr__(self, "_depth", self._depth + 1)
            self.threads.add(me)
        try:
            yield
        finally:
            with self._guard:
                object.__setattr__(self, "_depth", self._depth - 1)
                if self._depth == 0:
                    object.__setattr__(self, "_owner", None)

    def __getattr__(self, name: str):
        with self._entered(name):
            value = getattr(self._engine, name)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            with self._entered(name):
                if name == "poll":
                    time.sleep(self._dwell)
                return value(*args, **kwargs)

        return call

    def __setattr__(self, name: str, value) -> None:
        with self._entered(name):
            setattr(self._engine, name, value)


def test_the_trainer_and_the_engine_thread_are_never_inside_the_engine_at_once(tmp_path):
    """A threaded run on an engine that fails when two threads are inside it: what the trainer
    reads from the engine as the engine thread generates (the rollout's trace, the counts of
    restarts and tool calls, the tokens generated) waits for the engine thread's step to end."""
    settings = THREADED | {"rollout.eta": 2, "train.steps": 4}
    config = tiny(tmp_path, "rollverify", **settings)
    engine = OneThreadOnly(make_engine(config))
    summary = train(config, engine=engine)
    assert summary.steps == 4 and engine.clashes == []
    assert {"MainThread", "rollverify-engine"} <= engine.threads, "both threads used the engine"


def test_the_trace_is_taken_beside_the_engine_thread_one_thread_at_a_time():
    """The trainer takes the trace over and over while the engine thread generates: each take
    waits for the engine thread's step to end (the engine fails if they meet inside)."""
    model = random_model(seed=0, eos_bias=-1.0)
    hf = HFEngine(model, slots=4, max_new_tokens=12, eos_token_id=EOS, pad_token_id=PAD)
    engine = OneThreadOnly(hf)
    thread = EngineThread(
        engine, Prompts(), AsyncState(), batch_groups=1, group_size=2, eta=1, keep_kv=False
    )
    try:
        # a second of takes (its polls dwell 5 ms each), longer if a loaded machine has not
        # let the engine thread generate yet
        steps, start = [], time.monotonic()
        while time.monotonic() < start + 1.0 or (not steps and time.monotonic() < start + 60):
            steps += thread.take_trace()
        assert steps, "the engine thread generated while the trace was taken"
        assert thread.next_batch(verify=None, admit_eta=1, should_stop=lambda: False).groups
    finally:
        thread.close()
    assert engine.clashes == [] and engine.threads == {"MainThread", "rollverify-engine"}


@pytest.mark.slow
def test_a_collapsing_acceptance_rate_turns_an_asynchronous_run_synchronous(tmp_path):
    """As tests/test_switching.py's run, asynchronous on the in-process engine: acceptance
    falls, the window fills, the run switches; from then on no group starts before the policy
    it trains under, so once the groups started earlier are trained (within eta steps), no
    token is older than its policy: nothing is left to verify, nothing is cut or regenerated."""
    steps, eta = 10, 2
    settings = {"rollout.mode": "async", "rollout.eta": eta, "train.steps": steps}
    settings |= {"train.learning_rate": 0.05, "verify.window": 2, "verify.ds": 1e-3}
    summary = train(tiny(tmp_path, "rollverify", **settings))
    metrics = history(summary)
    switch = summary.switch_step
    assert switch is not None and switch + eta < steps - 2, "the switch must leave steps to check"
    assert metrics["switched"] == {s: float(s >= switch) for s in range(1, steps + 1)}
    verified = metrics["cache_tokens_verified"]
    assert all(verified[s] > 0 for s in range(2, switch + 1)), "stale tokens verified before"
    synchronous = range(switch + eta + 1, steps + 1)
    assert all(verified[s] == 0 for s in synchronous), verified
    regenerated = metrics["tokens_regenerated_total"]
    assert len({regenerated[s] for s in synchronous}) == 1, regenerated
