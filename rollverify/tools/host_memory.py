"""How many sandboxes run at once: as many as the host's free memory holds.

Each sandbox holds its memory budget (`memory_mb`, all its processes together) from the gate
while it runs; a sandbox that would take the held total past the gate's budget waits for one
to end. The budget is half of the memory the kernel reported available (MemAvailable) when the
first sandbox started: the other half is the run's own (the trainer, the engine). One sandbox
larger than the whole budget still runs, alone.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HOST_SHARE = 0.5  # of MemAvailable, for sandboxes


def available_mb() -> int:
    """The host's MemAvailable, in MiB (/proc/meminfo)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    raise OSError("/proc/meminfo has no MemAvailable")


class MemoryGate:
    def __init__(self, budget_mb: int | None = None) -> None:
        self.budget_mb = budget_mb  # None: HOST_SHARE of MemAvailable, read at first use
        self.held_mb = 0
        self.running = 0
        self.peak_running = 0  # the most sandboxes that ran at once (for tests and benchmarks)
        self._changed = threading.Condition()

    @contextmanager
    def hold(self, memory_mb: int) -> Iterator[None]:
        """Wait until `memory_mb` fits beside what the running sandboxes hold; hold it."""
        with self._changed:
            if self.budget_mb is None:
                self.budget_mb = max(1, int(available_mb() * HOST_SHARE))
            self._changed.wait_for(
                lambda: self.running == 0 or self.held_mb + memory_mb <= self.budget_mb
            )
            self.held_mb += memory_mb
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
        try:
            yield
        finally:
            with self._changed:
                self.held_mb -= memory_mb
                self.running -= 1
                self._changed.notify_all()


GATE = MemoryGate()  # the process's: every sandbox goes through it
