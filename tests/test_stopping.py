"""Stopping a run: the first SIGINT/SIGTERM asks for a stop at a safe point, the second stops at
once (rollverify/training/stopping.py). Real signals, delivered to this process."""

from __future__ import annotations

import signal
import threading

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
