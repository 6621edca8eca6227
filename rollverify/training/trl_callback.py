"""TRL's step boundaries, handed to the training loop (loop.py, whose docstring maps each of
TRL's calls to the step's phase): the step begins, the optimizer stepped, TRL logged."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from transformers import TrainerCallback

from rollverify.infra.kill_points import kill_point

if TYPE_CHECKING:
    from rollverify.training.checkpoint_client import CheckpointClient


class SteppedLoop(Protocol):
    """What the callback calls: the step's phases and the checkpoint client."""

    checkpoints: CheckpointClient

    def begin_step(self) -> None: ...

    def after_update(self, step: int) -> None: ...

    def log(self, step: int, trl_logs: dict[str, float]) -> None: ...


class LoopCallback(TrainerCallback):
    """TRL's step boundaries, handed to the loop: after the update, then the log and the
    checkpoint (after the log, so a resumed run draws the random numbers this one would).
    A step is logged once, the first time TRL logs at a new `global_step`."""

    def __init__(self, loop: SteppedLoop, logged_step: int = 0, resuming: bool = False):
        self.loop = loop
        self.logged_step = logged_step
        self.resuming = resuming

    def on_train_begin(self, args, state, control, **kwargs):
        self.loop.checkpoints.at_train_begin(resuming=self.resuming)

    def on_step_begin(self, args, state, control, **kwargs):
        self.loop.begin_step()

    def on_step_end(self, args, state, control, **kwargs):
        kill_point("train", state.global_step)  # tests: optimizer stepped, nothing synced
        self.loop.after_update(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.global_step <= self.logged_step:  # the end-of-training summary, or a repeat
            return
        self.logged_step = state.global_step
        self.loop.log(state.global_step, logs or {})
        self.loop.checkpoints.at_step_end(state.global_step)
