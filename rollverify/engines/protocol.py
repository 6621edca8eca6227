"""What the rollout scheduler needs from an engine: five calls, same for every backend.

An engine generates tokens for trajectories (rollverify.trajectory.Trajectory), appending to
each its token ids, behavior log-probs and the policy version that sampled them. A submitted
trajectory resumes from whatever tokens it already has (a kept prefix, possibly empty) with the
rest of its token budget.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import torch

from rollverify.trajectory import Trajectory


@dataclass
class EngineStats:
    """Counters since the engine started (or since `reset_stats`).

    slot_steps_busy / (slots * decode_steps) is slot utilization: the share of slot-steps that
    produced a token, the quantity partial rollout raises.
    """

    decode_steps: int = 0
    slot_steps_busy: int = 0
    tokens_generated: int = 0
    tokens_prefilled: int = 0
    aborted: int = 0

    def utilization(self, slots: int) -> float:
        return self.slot_steps_busy / (slots * self.decode_steps) if self.decode_steps else 0.0


class RolloutEngine(Protocol):
    slots: int  # trajectories generated at once
    version: int  # policy version of the weights it samples with
    stats: EngineStats

    @property
    def has_work(self) -> bool:
        """Anything running or queued."""

    def submit(self, trajectories: list[Trajectory]) -> None:
        """Queue trajectories; each continues from its current tokens."""

    def poll(self) -> list[Trajectory]:
        """Generate a little (one decode step for `hf`); return trajectories that just finished."""

    def idle_slots(self) -> int:
        """Slots that would sit idle now: free and with nothing queued for them."""

    def pause(self) -> list[Trajectory]:
        """Abort everything running or queued; return it unfinished, partial tokens kept."""

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Take the trainer's new weights; tokens sampled from now on carry `version`."""

    def seeded(self, seed: int) -> AbstractContextManager[None]:
        """Sample with a generator seeded `seed` inside the block (evaluation), then resume the
        training stream of random numbers exactly where it was."""
