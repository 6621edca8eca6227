"""Checkpoints and stops: the loop hands both to this client, as torchtune's recipes hand
theirs to a checkpointer, and calls it at two moments:

    at_train_begin()  step 0's checkpoint (a run killed before its first resumes too)
    at_step_end(step) after the step's log, between rollout batches: a checkpoint every
                      train.checkpoint_every steps and at the last, then a stop if one was
                      asked for (SIGINT/SIGTERM, training/stopping.py)

and `stop_here()` when a stop paused a rollout. A stop writes a checkpoint of where the run
is (unless just written, or the stop's grace would not cover the write), then raises
RunInterrupted. The checkpoint holds everything needed to continue
(training/checkpoint/run_state.py); every rank takes part in writing it, and every rank learns
whether it landed (training/distributed/world.py).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint import CheckpointException

from rollverify.config import TrainConfig
from rollverify.infra.kill_points import phase_mark
from rollverify.training.booking import Booking
from rollverify.training.checkpoint.background_write import BackgroundWrite, detached
from rollverify.training.checkpoint.files import save as save_checkpoint
from rollverify.training.checkpoint.run_state import (
    CheckpointedLoop,
    capture,
    rng_parts,
    whole_state,
)
from rollverify.training.checkpoint.sharded import write_parts
from rollverify.training.distributed.world import World
from rollverify.training.schedule import Schedule
from rollverify.training.stopping import RunInterrupted, StopRequest


class CheckpointClient:
    def __init__(
        self,
        loop: CheckpointedLoop,
        *,
        world: World,
        booking: Booking,
        tracker: Any,
        run_dir: Path | None,
        train: TrainConfig,
        schedule: Schedule,
        stop: StopRequest,
        start_step: int,
    ) -> None:
        """loop: what a checkpoint is taken from (its trainer, engine and own state);
        tracker: rank 0's (its MLflow run, kept in the checkpoint)."""
        self.loop, self.trainer, self.world = loop, loop.trainer, world
        self.booking, self.tracker, self.run_dir = booking, tracker, run_dir
        self.train, self.schedule, self.stop = train, schedule, stop
        self.start_step = start_step
        self.checkpointed_step: int | None = None  # the step of the last checkpoint written
        self.checkpoint_seconds = 0.0  # how long the last one took to write (rank 0)
        self.pending_write: BackgroundWrite | None = None  # rank 0's, train.async_checkpoint
        self.pending_step: int | None = None  # the step it is of (every rank)
        self.failure: Exception | None = None  # rank 0's: the run stops with it after a step

    # -- the two moments of a run ---------------------------------------------------------------

    def at_train_begin(self, resuming: bool) -> None:
        if not resuming:  # step 0: a run killed before its first checkpoint resumes too
            self.save()

    def at_step_end(self, step: int) -> None:
        """After the step's log (so a resumed run draws the random numbers this one would).
        Only between rollout batches: TRL holds the rest of a batch it is training."""
        if not self.schedule.between_rollouts(step):
            return
        if self.failure_due():  # the engine is unusable: this step's checkpoint, then the error
            if self.checkpointed_step != step and self.schedule.checkpointed != step:
                self.save()
            self.finish()
            raise self.failure or RuntimeError("rank 0 stopped the run (its engine failed)")
        # The last step's checkpoint is written before the end; a stop asked for there lets
        # the run finish (its summary written), as it ends anyway.
        last = step >= self.train.steps
        if self.schedule.checkpoint_due(step):
            self.save(background=self.train.async_checkpoint and not last)
        if self.stop_requested() and not last:
            self.stop_here()

    # -- writing ----------------------------------------------------------------------------------

    def save(self, background: bool = False) -> None:
        """Write a checkpoint of the step just finished (its time is a ledger phase), with
        every rank's RNG; `background`: from a copy, in a thread, while training goes on
        (background_write.py). A sharded run's ranks first write their parts of the weights
        and moments (checkpoint/sharded.py). A write that fails (a full disk) is reported
        and training goes on: the older ones are kept."""
        self.finish()  # one write at a time
        step = self.trainer.state.global_step
        root, keep = self.run_dir / "checkpoints", self.train.keep_checkpoints
        folder, temporary = None, None
        phase_mark("checkpoint", step)  # tests: which phase a lost node met
        with self.booking.phase("checkpoint") as clock:
            try:
                model = self.trainer.accelerator.unwrap_model(self.trainer.model)
                optimizer = self.trainer.optimizer  # sharded: each rank writes its part first
                temporary = write_parts(self.world, root, step, model, optimizer)  # (collective)
                whole = whole_state(self.trainer, self.world.gather_rng(rng_parts()))
                if self.world.main:
                    self.booking.flush_trace(self.run_dir, step)  # its steps, once: before
                    snapshot = capture(self.loop, self.tracker.run_id, self.tracker.uri, whole)
                    if background:
                        write = BackgroundWrite(root, detached(snapshot), keep, temporary)
                        self.pending_write = write
                    else:
                        folder = save_checkpoint(root, snapshot, keep=keep, temporary=temporary)
            except (OSError, CheckpointException) as error:
                warnings.warn(f"checkpoint of step {step} not written: {error}", stacklevel=2)
                if temporary is not None and self.world.main:
                    shutil.rmtree(temporary, ignore_errors=True)
        self.checkpoint_seconds = clock.seconds
        phase_mark("idle", step)  # (until the next step's rollout)
        if background:
            self.schedule.checkpointed, self.pending_step = step, step
        elif self.world.agree_checkpoint_written(folder is not None):
            self.checkpointed_step = self.schedule.checkpointed = step

    def finish(self) -> None:
        """Wait for a checkpoint being written in the background; then every rank knows
        whether it landed."""
        if self.pending_step is None:
            return
        write, self.pending_write = self.pending_write, None
        folder = write.wait() if write is not None else None
        if write is not None:  # the whole write's time, for a stop's grace
            self.checkpoint_seconds += write.seconds
        if self.world.agree_checkpoint_written(folder is not None):
            self.checkpointed_step = self.pending_step
        self.pending_step = None

    def last_good(self) -> int:
        """The step `rvctl resume` would continue from: the last checkpoint this process
        wrote, else the one it resumed from (or step 0's)."""
        return self.checkpointed_step if self.checkpointed_step is not None else self.start_step

    # -- stopping ---------------------------------------------------------------------------------

    def fail_after_step(self, error: Exception) -> None:
        """Rank 0's engine cannot go on (WeightsMixed): the step ends, its checkpoint is
        written, then the run stops with `error` (at_step_end)."""
        self.failure = error

    def failure_due(self) -> bool:
        """Rank 0's failure, on every rank: they stop after the same step."""
        return self.world.decide(self.failure is not None)

    def stop_requested(self) -> bool:
        """Rank 0's stop request, on every rank: they stop after the same step."""
        return self.world.agree_on_stop(self.stop.requested)

    def stop_here(self) -> None:
        """Save where the run is (unless just saved, or the stop's grace would not cover the
        write) and stop it: RunInterrupted."""
        step = self.trainer.state.global_step
        self.finish()
        if self.checkpointed_step != step:
            # Rank 0's call: the last write's time, with a margin, against the grace left.
            fits = self.stop.seconds_left() > 1.5 * self.checkpoint_seconds + 1
            if self.world.agree_to_write(fits):
                self.save()
            else:
                last = self.last_good()
                raise RunInterrupted(
                    last,
                    self.run_dir,
                    f"stopped after step {step} without its checkpoint (the last took "
                    f"{self.checkpoint_seconds:.0f} s, more than train.stop_grace_seconds "
                    f"left); steps after {last} are trained again",
                )
        saved = self.checkpointed_step == step
        if self.failure is not None:  # the engine lost (rank 0's): the run stops with its error
            raise self.failure
        raise RunInterrupted(step, self.run_dir if saved else None)
