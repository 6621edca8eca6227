"""Stopping a run without losing it: SIGINT / SIGTERM ask, the loop stops at a safe point.

The first signal sets `requested`: a rollout in progress pauses at once (its tokens go to the
cache), a training step in progress finishes; then the loop writes a checkpoint and raises
RunInterrupted (a KeyboardInterrupt: the CLI exits 130). A second signal interrupts at once,
like Ctrl-C always does; the last checkpoint written is then the one to resume from.
Handlers can only be set in the main thread; elsewhere (a Ray Tune trial thread) signals keep
their usual meaning.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
    """The run stopped on request after writing a checkpoint of `step`."""

    def __init__(self, step: int, run_dir: Path | None) -> None:
        super().__init__(f"stopped after step {step}; checkpoint saved")
        self.step, self.run_dir = step, run_dir


class StopRequest:
    def __init__(self) -> None:
        self.requested = False

    @contextmanager
    def listening(self) -> Iterator[StopRequest]:
        """Turn the first SIGINT/SIGTERM into a request while the block runs."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {signum: signal.getsignal(signum) for signum in SIGNALS}

        def request(signum, frame) -> None:
            if self.requested:
                raise KeyboardInterrupt  # asked twice: stop now
            self.requested = True

        for signum in SIGNALS:
            signal.signal(signum, request)
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
