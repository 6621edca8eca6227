"""Asynchronous training with the engine in a thread of its own (rollout.lockstep false,
rollverify/rollout/engine_thread.py): it generates beside the trainer within the staleness
bound, its errors reach the trainer, a hold lands the updates on their way first, the trainer
and the engine thread are never inside the engine at once, and a threaded run killed in
training resumes with nothing lost."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from rollverify.rollout.async_rollout import AsyncState
from rollverify.rollout.engine_thread import EngineThread
from rollverify.rollout.engines.hf_engine import HFEngine
from rollverify.rollout.engines.protocol import EngineLost, SyncCheckError
from rollverify.rollout.schedules import PromptGroup, RolloutInterrupted
from rollverify.training.checkpoint.files import folder_for, latest
from rollverify.training.checkpoint.files import load as load_checkpoint
from rollverify.training.parts import make_engine
from rollverify.training.run import train
from tests.cli import run_cli
from tests.runs import (
    history,
    tiny,
    tiny_file,
)
from tests.tiny import EOS, PAD, prompts, random_model

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


class LostAtSecondPoll(HFEngine):
    """An engine whose node is lost for good (vllm.node_lost: stop) as its thread polls it."""

    polls = 0

    def poll(self, *args, **kwargs):
        self.polls += 1
        if self.polls == 2:
            raise EngineLost("vllm.node_lost: stop: no node had room for engine 0")
        return super().poll(*args, **kwargs)


def test_an_engine_lost_in_its_thread_is_paused_for_the_checkpoint_whatever_call_meets_it():
    """The loss met first by a hold (an evaluation's, a checkpoint's): the hold goes on, the
    engine's work out in state.in_flight for the checkpoint; the next batch then stops the
    run with it (RolloutInterrupted naming the loss), nothing lost."""
    model = random_model(seed=0, eos_bias=-1.0)
    engine = LostAtSecondPoll(model, slots=4, max_new_tokens=12, eos_token_id=EOS, pad_token_id=PAD)
    state = AsyncState()
    thread = EngineThread(
        engine, Prompts(), state, batch_groups=1, group_size=2, eta=1, keep_kv=False
    )
    try:
        thread._thread.join(timeout=60)  # (the engine thread ends with the loss)
        assert engine.polls == 2
        with thread.held():  # an evaluation's or a checkpoint's: it goes on
            in_flight = list(state.in_flight)
        assert in_flight and all(not t.finished for t in in_flight), "paused, not dropped"
        assert sum(len(t) for t in in_flight) > 0, "with the tokens of the first poll"
        with pytest.raises(RolloutInterrupted) as stopped:
            thread.next_batch(verify=None, admit_eta=1, should_stop=lambda: False)
        assert isinstance(stopped.value.lost, EngineLost)
        assert state.in_flight == in_flight
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
