"""Stopping a run: the first SIGINT/SIGTERM asks for a stop at a safe point, the second stops at
once (rollverify/training/stopping.py). Real signals, delivered to this process."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from rollverify.training.stopping import StopRequest

needs_main_thread = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signal handlers can only be set in the main thread",
)


@needs_main_thread
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_asks_and_the_second_stops_at_once(signum):
    stop = StopRequest()
    before = signal.getsignal(signum)
    with stop.listening():
        # Without a handler of its own, SIGTERM would end the test process instead of failing.
        assert signal.getsignal(signum) not in (before, signal.SIG_DFL, signal.SIG_IGN)
        signal.raise_signal(signum)  # handlers run before raise_signal returns
        assert stop.requested, "the first signal is a request"
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signum)


@needs_main_thread
def test_the_previous_handlers_come_back():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with StopRequest().listening():
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
    assert {s: signal.getsignal(s) for s in before} == before


def test_outside_the_main_thread_signals_keep_their_meaning():
    seen = {}

    def listen() -> None:
        with StopRequest().listening():
            seen["handler"] = signal.getsignal(signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=listen)
    thread.start()
    thread.join()
    assert seen["handler"] is before


@needs_main_thread
def test_when_the_grace_runs_out_the_run_is_stopped_at_once():
    stop = StopRequest(grace=0.3)
    assert stop.seconds_left() == float("inf")  # nothing asked yet
    with stop.listening():
        signal.raise_signal(signal.SIGTERM)
        assert 0 < stop.seconds_left() <= 0.3
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            time.sleep(10)  # a step that would outlast the grace
    assert time.monotonic() - started < 3 and stop.grace_expired


@needs_main_thread
def test_without_a_grace_a_request_waits_for_the_safe_point():
    stop = StopRequest()
    with stop.listening():
        signal.raise_signal(signal.SIGTERM)
        time.sleep(0.5)  # no interrupt
        assert stop.requested and not stop.grace_expired
        assert stop.seconds_left() == float("inf")


@needs_main_thread
def test_a_checkpoint_the_grace_cannot_cover_is_skipped_and_the_last_one_resumes(tmp_path):
    """SIGTERM after step 1 with 0.5 s of grace: the last checkpoint took longer than that
    leaves (with its margin), so the run stops without writing one, from step 0's."""
    from rollverify.training.checkpoint.files import latest
    from rollverify.training.run import resume, train
    from rollverify.training.run_folder import find_run
    from rollverify.training.stopping import RunInterrupted
    from tests.runs import tiny

    def preempt(step: int, metrics: dict) -> None:
        if step == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    config = tiny(tmp_path, "rollverify", **{"train.stop_grace_seconds": 0.5})
    with pytest.raises(RunInterrupted) as stopped:
        train(config, on_step=preempt)
    assert stopped.value.step == 0 and "without its checkpoint" in stopped.value.note
    run_dir = find_run(tmp_path)
    assert stopped.value.run_dir == run_dir
    assert latest(run_dir / "checkpoints").step == 0  # nothing half-written in its place
    assert resume(run_dir).steps == 3


@needs_main_thread
def test_a_stop_asked_at_the_last_step_lets_the_run_finish(tmp_path):
    from rollverify.training.run import train
    from tests.runs import tiny

    def late(step: int, metrics: dict) -> None:
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    summary = train(tiny(tmp_path, "grpo"), on_step=late)  # no RunInterrupted
    assert summary.steps == 3 and (tmp_path / summary.run_dir / "summary.json").is_file()
