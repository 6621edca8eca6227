"""Progress of long commands: rich's live displays on a terminal, plain lines in a log.

Under Slurm or Kubernetes stderr is a file, where a live display prints only its last state:
there every step (and every finished trial of a compare or a sweep) is one line instead, with
the figures a researcher greps for: `grpo step 3/40  reward 0.5  OPS 0.00281  accept 0.95
4.2 s` (four significant digits, as the tables: an OPS of 1e-4 is not shown as 0.000).
"""

from __future__ import annotations

import math
import sys
import time

from rollverify.tracking.metric_names import LIVE
from rvctl.output import stderr


def plain() -> bool:
    """Whether progress goes out as plain lines: stderr is not a terminal."""
    return not stderr.is_terminal


def line(text: str) -> None:
    """One line on stderr, flushed at once (a log is read while the job runs)."""
    print(text, file=sys.stderr, flush=True)


def figures(metrics: dict[str, float]) -> str:
    """The live figures of a step (reward, OPS, acceptance, eval accuracy) that it has."""
    parts = []
    for name, label in LIVE:
        value = metrics.get(name)
        if value is not None and not math.isnan(value):
            parts.append(f"{label} {value:.4g}")  # as the tables show it: OPS's size too
    return "  ".join(parts)


class StepLines:
    """A callback (step, metrics) that prints one line per step, with the step's seconds."""

    def __init__(self, name: str, total: int | None) -> None:
        self.name, self.total = name, total
        self.last = time.perf_counter()

    def start(self) -> None:
        """The run starts now (a compare's later pairs wait for the earlier ones)."""
        self.last = time.perf_counter()

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        of = f"/{self.total}" if self.total else ""
        parts = [f"{self.name} step {step}{of}", figures(metrics), f"{seconds:.1f} s"]
        line("  ".join(p for p in parts if p))
