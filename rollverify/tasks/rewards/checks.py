"""What the code reward's checks saw besides the scores: programs the judge caught tampering
with it, and sandboxes that failed (a launcher killed, a namespace that could not be made, a
full disk). Either costs that one program its reward (0), never the run. Counted per step
(`reward_tampering`, `sandbox_errors`); each kind of sandbox failure is told once.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass


class SandboxFailureWarning(UserWarning):
    """The sandbox failed for a program (it scored 0; the run goes on)."""


@dataclass(frozen=True)
class CheckCounts:
    tampering: int = 0  # programs the judge caught trying to forge a pass
    sandbox_errors: int = 0  # programs (or tool calls) the sandbox failed to run


class RewardChecks:
    """A thread-safe tally (rewards are scored `reward_workers` at a time), taken per step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tampering = self._sandbox_errors = 0
        self._told: set[str] = set()

    def tampered(self) -> None:
        with self._lock:
            self._tampering += 1

    def sandbox_failed(self, error: BaseException) -> None:
        kind = type(error).__name__
        with self._lock:
            self._sandbox_errors += 1
            first = kind not in self._told
            self._told.add(kind)
        if first:
            warnings.warn(
                f"the sandbox failed for a program ({kind}: {error}); it scores 0 and the run "
                "goes on (counted in sandbox_errors, told once)",
                SandboxFailureWarning,
                stacklevel=3,
            )

    def take(self) -> CheckCounts:
        """The counts since the last take."""
        with self._lock:
            counts = CheckCounts(self._tampering, self._sandbox_errors)
            self._tampering = self._sandbox_errors = 0
        return counts
