"""What the training loop and the rollout scheduler need from an engine, same for every
backend (hf, vllm, simulated): everything callers use is listed in `RolloutEngine`.

An engine generates tokens for trajectories (rollverify.rollout.trajectory.Trajectory), appending to
each its token ids, behavior log-probs and the policy version that sampled them. A submitted
trajectory resumes from whatever tokens it already has (a kept prefix, possibly empty) with the
rest of its token budget.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sized
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import torch

from rollverify.cost.trace import EngineStep
from rollverify.rollout.trajectory import Trajectory


class SyncCheckError(RuntimeError):
    """After a weight sync the engine's log-probs disagree with the trainer's."""

    exit_code = 1  # rvctl prints the message alone: it says what happened and what to check


class EngineLost(RuntimeError):
    """The run's engine cannot go on (its node lost for good, its weights mixed): the run stops
    after a checkpoint of where it is, which `rvctl resume` continues from. A rollout that
    meets it keeps what was generated (schedules.collect: as a stop request's pause does)."""

    exit_code = 1  # rvctl prints the message alone: it says what was lost and what to do


class WeightsMixed(EngineLost):
    """Engines were lost during a weight sync that cannot be sent again (a sharded trainer's
    weights are gathered once a sync): the live engines hold part of the new weights. The run
    stops after this step's checkpoint (training/loop.py)."""

    def __init__(self, live: list[int], lost: list[int], version: int) -> None:
        self.live, self.lost, self.version = live, lost, version
        held = f"engines {', '.join(map(str, live))} hold" if live else "no live engine holds"
        super().__init__(
            f"engine(s) {', '.join(map(str, lost))} lost during the weight sync of version "
            f"{version}, which a sharded trainer cannot send again: {held} part of it; the run "
            f"stops after step {version}'s checkpoint (rvctl resume continues it)"
        )


@torch.no_grad()
def probe_logprobs_of(model: torch.nn.Module, token_ids: list[int]) -> torch.Tensor:
    """log p(token_i | tokens before it), i >= 1, at temperature 1: float [T-1]. The weight
    sync check compares these (raw policy log-probs: vLLM's prompt log-probs are raw too)."""
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        ids = torch.tensor([token_ids], device=device)
        logits = model(input_ids=ids).logits[0, :-1].float()
        return torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None]).squeeze(1).cpu()
    finally:
        model.train(was_training)


def check_unfinished(trajectories: Iterable[Trajectory]) -> None:
    """An engine generates for unfinished trajectories only."""
    for trajectory in trajectories:
        if trajectory.finished:
            raise ValueError(f"trajectory {trajectory.key} is finished; submit unfinished ones")


class QueuedSlots:
    """The queue side of an in-process engine (hf, simulated): submitted trajectories wait in
    `_queue` until a slot of `slots` is free; `_rows` holds the running ones."""

    slots: int
    _queue: deque[Trajectory]
    _rows: Sized

    def submit(self, trajectories: list[Trajectory]) -> None:
        check_unfinished(trajectories)
        self._queue.extend(trajectories)

    def idle_slots(self) -> int:
        return max(0, self.slots - len(self._rows) - len(self._queue))

    @property
    def has_work(self) -> bool:
        return bool(self._rows or self._queue)


@dataclass
class EngineStats:
    """Counters since the engine started (or since `reset_stats`).

    slot_steps_busy / (slots * decode_steps) is slot utilization: the share of slot-steps that
    produced a token, the quantity partial rollout raises.
    """

    decode_steps: int = 0
    slot_steps_busy: int = 0
    tokens_generated: int = 0
    tokens_regenerated: int = 0  # generated again after verification truncated them
    tokens_prefilled: int = 0
    aborted: int = 0
    restarts: int = 0  # sidecars replaced after dying
    preemptions: int = 0  # rows whose KV was dropped for lack of cache (the simulated engine)
    tokens_recomputed: int = 0  # prompt + tokens those rows prefill again when they return
    tokens_recomputed_on_update: int = 0  # KV of running rows prefilled under weights loaded
    # in flight (asynchronous training)

    def utilization(self, slots: int) -> float:
        return self.slot_steps_busy / (slots * self.decode_steps) if self.decode_steps else 0.0


class RolloutEngine(Protocol):
    slots: int  # trajectories generated at once
    max_new_tokens: int  # each trajectory's token budget
    temperature: float  # sampling temperature (behavior log-probs are at it)
    top_p: float  # nucleus truncation of sampling only (rollverify/core/sampling.py)
    top_k: int  # top-k truncation of sampling only
    version: int  # policy version of the weights it samples with
    stats: EngineStats

    @property
    def has_work(self) -> bool:
        """Anything running or queued."""

    def start(self) -> dict:
        """Bring the engine up (sidecars: processes); returns facts such as start seconds."""

    def shutdown(self) -> None:
        """Stop everything the engine started; safe to call twice."""

    def submit(self, trajectories: list[Trajectory]) -> None:
        """Queue trajectories; each continues from its current tokens."""

    def poll(self) -> list[Trajectory]:
        """Generate a little (one decode step for `hf`); return trajectories that just finished."""

    def idle_slots(self) -> int:
        """Slots that would sit idle now: free and with nothing queued for them."""

    def pause(self) -> list[Trajectory]:
        """Abort everything running or queued; return it with partial tokens kept (a request
        that finished while the abort was on its way comes back finished)."""

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Take the trainer's new weights; tokens sampled from now on carry `version`."""

    def probe_logprobs(self, token_ids: list[int]) -> torch.Tensor:
        """Each replica's log p(token_i | tokens before it), i >= 1, at temperature 1:
        float [replicas, T-1]. Compared with the trainer's after every weight sync."""

    def sampling_state(self) -> torch.Tensor:
        """Where the training stream of random numbers is (a checkpoint keeps it)."""

    def load_sampling_state(self, state: torch.Tensor) -> None:
        """Continue the training stream from a `sampling_state`."""

    def reset_stats(self) -> None:
        """Start `stats` from zero (a benchmark's measured part)."""

    def take_trace(self) -> list[EngineStep]:
        """The engine steps since the last call (rows, contexts, prefill: the cost model's
        input, rollverify/cost/trace.py), and forget them."""

    def seeded(self, seed: int) -> AbstractContextManager[None]:
        """Sample with a generator seeded `seed` inside the block (evaluation), then resume the
        training stream of random numbers exactly where it was."""
