"""The processes that train one run: a torch.distributed world started by torchrun (launch.py
on one machine, torchrun itself across machines; docs/distributed.md).

Rank 0 drives everything but the update: the rollout engines, rewards, verification,
switching, the ledger, MLflow and the checkpoints. Every rank trains its share of each batch
(DDP or FSDP2, through transformers' Trainer and accelerate) and meets rank 0 at these named
calls, at the same moment (each a collective: every rank makes it):

    in every step (training/loop.py)
    score(items, fn)              rank 0's trajectories scored under the current weights,
                                  each rank scoring an equal part (the batch's OPS, the
                                  cache's verification)
    share(batch)                  the rollout batch, from rank 0, each rank keeping its slice
    agree_on_stop(requested)      rank 0's stop request (or its paused rollout): every rank
                                  stops after the same step
    at a checkpoint or a stop (training/checkpoint_client.py)
    gather_rng(state)             every rank's RNG state on rank 0
    agree_checkpoint_written(ok)  whether rank 0's checkpoint landed (the step to resume from)
    agree_to_write(fits)          rank 0's call: a stop's grace covers one more checkpoint

The agree_* calls are decide(flag) under the name of what is decided; broadcast and gather are
the primitives under all of them.

One process (the default) is a world of size 1 and every call is free.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

COLLECTIVE_TIMEOUT = timedelta(hours=3)


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def joined(cls) -> World:
        """This process's world: the one torchrun started it in (WORLD_SIZE), else size 1.
        accelerate's state joins the process group: gloo on CPU, NCCL on GPUs."""
        if int(os.environ.get("WORLD_SIZE", "1")) == 1:
            return cls()
        from accelerate import PartialState

        # Ranks wait for rank 0 while it alone rolls out, evaluates or writes a checkpoint:
        # at 8B an evaluation takes tens of minutes. (A rank that dies is seen by torchrun.)
        state = PartialState(cpu=not torch.cuda.is_available(), timeout=COLLECTIVE_TIMEOUT)
        return cls(state.process_index, state.num_processes)

    def leave(self) -> None:
        """After a run every rank finished: wait for the others (a rank may still be taking
        in the last broadcast), then tear the process group down before the process exits.
        Left to the interpreter's exit, gloo's threads may still be joinable when their C++
        objects are destroyed, and the rank dies of SIGABRT ("terminate called without an
        active exception") after a run that finished (here: 1 of 4 runs of
        tests/test_distributed.py, each starting about six two-process runs). Torn down
        without the barrier first, the multi-node form hung once in two."""
        if self.size > 1 and torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()

    def broadcast(self, value: Any) -> Any:
        """Rank 0's `value`, on every rank (others pass anything, such as None)."""
        if self.size == 1:
            return value
        box = [value]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def share(self, columns: dict[str, list] | None) -> dict[str, list] | None:
        """Rank 0's batch (equal-length columns), this rank's contiguous slice of it: the
        order TRL gathers them back in (its group advantages need whole groups). None (rank
        0 stopped) stays None."""
        columns = self.broadcast(columns)
        if columns is None or self.size == 1:
            return columns
        rows = len(next(iter(columns.values())))
        share = rows // self.size
        mine = slice(self.rank * share, (self.rank + 1) * share)
        return {name: values[mine] for name, values in columns.items()}

    def score(
        self, items: list | None, score: Callable[[list], torch.Tensor]
    ) -> torch.Tensor | None:
        """Rank 0's `items` scored by `score` (a [n, width] tensor per list), each rank
        scoring an equal part: the rows in order, right-padded with 0 to the widest, on rank
        0; None on the others, and for no items. Every rank makes the same number of forward
        passes (a sharded model's ranks must): the last parts are padded with copies of the
        first item."""
        items = self.broadcast(items)
        if not items:
            return None
        if self.size == 1:
            return score(items)
        part = -(-len(items) // self.size)
        mine = items[self.rank * part : (self.rank + 1) * part]
        scored = score(mine + [items[0]] * (part - len(mine)))[: len(mine)]
        parts = self.gather(scored)
        if not self.main:
            return None
        width = max(p.shape[1] for p in parts)
        padded = [torch.nn.functional.pad(p, (0, width - p.shape[1])) for p in parts]
        return torch.cat(padded)

    def agree_on_stop(self, requested: bool) -> bool:
        """Rank 0's stop request on every rank: they stop after the same step."""
        return self.decide(requested)

    def agree_checkpoint_written(self, written: bool) -> bool:
        """Whether rank 0's checkpoint landed, on every rank."""
        return self.decide(written)

    def agree_to_write(self, fits: bool) -> bool:
        """Rank 0's call on whether a stop's grace covers one more checkpoint."""
        return self.decide(fits)

    def gather_rng(self, state: Any) -> list[Any] | None:
        """Every rank's RNG state, in rank order, on rank 0 (None on the others)."""
        return self.gather(state)

    def decide(self, flag: bool) -> bool:
        """Rank 0's `flag` on every rank: one decision for the whole world."""
        return bool(self.broadcast(flag))

    def gather(self, value: Any) -> list[Any] | None:
        """Every rank's `value`, in rank order, on rank 0 (None on the others)."""
        if self.size == 1:
            return [value]
        gathered: list[Any] | None = [None] * self.size if self.main else None
        torch.distributed.gather_object(value, gathered, dst=0)
        return gathered
