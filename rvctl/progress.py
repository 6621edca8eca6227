"""Progress of long commands: rich's live displays on a terminal, plain lines in a log.

Under Slurm or Kubernetes stderr is a file, where a live display prints only its last state:
there every step (and every finished trial of a compare or a sweep) is one line instead, with
the figures a researcher greps for: `grpo step 3/40  reward 0.5  loss 0.012  grad 0.41  clip 0
len 38.2  OPS 0.00281  accept 0.95  2,310 tok/s  4.2 s  left 2m31s` (four significant digits,
as the tables: an OPS of 1e-4 is not shown as 0.000). tok/s: the tokens the engine generated
in the step over the step's seconds; left: the mean step so far times the steps to go.
"""

from __future__ import annotations

import math
import sys
import time

from rollverify.tracking.metric_names import LIVE, TOKENS_GENERATED
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


def throughput(metrics: dict[str, float], seconds: float) -> str:
    """The step's generated tokens per second, where it generated any."""
    tokens = metrics.get(TOKENS_GENERATED)
    if not tokens or seconds <= 0 or math.isnan(tokens):
        return ""
    return f"{tokens / seconds:,.0f} tok/s"


def duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"


class StepLines:
    """A callback (step, metrics) that prints one line per step: its figures, tokens per
    second, seconds, and the time left at the mean step so far."""

    def __init__(self, name: str, total: int | None) -> None:
        self.name, self.total = name, total
        self.start()

    def start(self) -> None:
        """The run starts now (a compare's later pairs wait for the earlier ones)."""
        self.last = self.first = time.perf_counter()
        self.first_step: int | None = None

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        if self.first_step is None:  # step 0 (the base model's evaluation) or a resumed one
            self.first_step, self.first = step, now
        of = f"/{self.total}" if self.total else ""
        parts = [f"{self.name} step {step}{of}", figures(metrics), throughput(metrics, seconds)]
        parts.append(f"{seconds:.1f} s")
        done = step - self.first_step
        if self.total and done > 0 and step < self.total:
            parts.append(f"left {duration((now - self.first) / done * (self.total - step))}")
        line("  ".join(p for p in parts if p))
