"""Stopping a run without losing it: SIGINT / SIGTERM ask, the loop stops at a safe point.

The first signal sets `requested`: a rollout in progress pauses at once (its tokens go to the
cache), a training step in progress finishes; then the loop writes a checkpoint and raises
RunInterrupted (a KeyboardInterrupt: the CLI exits 130). A second signal interrupts at once,
like Ctrl-C always does; the last checkpoint written is then the one to resume from.

With a grace (train.stop_grace_seconds: a cluster's time between SIGTERM and SIGKILL), the run
is stopped at once when the grace runs out, as by a second signal, and the checkpoint at the
safe point is skipped when the last one took longer than what is left: exiting cleanly, with
the last good checkpoint to resume from, beats being killed halfway through a write.
Handlers can only be set in the main thread; elsewhere (a Ray Tune trial thread) signals keep
their usual meaning.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
    """The run stopped on request after writing a checkpoint of `step`."""

    def __init__(self, step: int, run_dir: Path | None, note: str | None = None) -> None:
        super().__init__(note or f"stopped after step {step}; checkpoint saved")
        self.step, self.run_dir, self.note = step, run_dir, note


class StopRequest:
    def __init__(self, grace: float | None = None) -> None:
        self.requested = False
        self.grace = grace  # seconds from the request to a stop at once (None: no limit)
        self.asked_at: float | None = None
        self.grace_expired = False

    def seconds_left(self) -> float:
        """Of the grace, since the request (inf: no grace, or nothing asked yet)."""
        if self.grace is None or self.asked_at is None:
            return math.inf
        return self.grace - (time.monotonic() - self.asked_at)

    def expire(self) -> None:
        self.grace_expired = True
        # A real signal to the main thread (it interrupts a blocking call there, which
        # _thread.interrupt_main does not): the handler sees a second signal, stop now.
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    @contextmanager
    def listening(self) -> Iterator[StopRequest]:
        """Turn the first SIGINT/SIGTERM into a request while the block runs."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
        timer: threading.Timer | None = None

        def request(signum, frame) -> None:
            nonlocal timer
            if self.requested:
                raise KeyboardInterrupt  # asked twice (or the grace ran out): stop now
            self.requested, self.asked_at = True, time.monotonic()
            if self.grace is not None:
                timer = threading.Timer(self.grace, self.expire)
                timer.daemon = True
                timer.start()

        for signum in SIGNALS:
            signal.signal(signum, request)
        try:
            yield self
        finally:
            if timer is not None:
                timer.cancel()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
