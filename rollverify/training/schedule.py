"""When a run evaluates, checkpoints and may stop, by optimizer step."""

from __future__ import annotations

from rollverify.config import TrainConfig


class Schedule:
    def __init__(self, train: TrainConfig, start_step: int = 0) -> None:
        self.train = train
        self.checkpointed = start_step  # the last checkpoint: 0, or the one resumed from

    def evaluation_due(self, step: int) -> bool:
        """Every train.eval_every steps (0: never) and at the last; never without
        train.evaluate."""
        every = self.train.eval_every
        due = step == self.train.steps or bool(every and step % every == 0)
        return due and self.train.evaluate

    def between_rollouts(self, step: int) -> bool:
        """After `step` no rollout batch is half trained (TRL holds the rest of a batch split
        into train.updates_per_rollout steps): checkpoints and stops land here."""
        return step % self.train.updates_per_rollout == 0 or step == self.train.steps

    def checkpoint_due(self, step: int) -> bool:
        """At the last step, and between rollouts once a multiple of train.checkpoint_every
        has passed since the last checkpoint (with one update per rollout: every N steps)."""
        every = self.train.checkpoint_every
        return step == self.train.steps or bool(
            every and step // every > self.checkpointed // every
        )
