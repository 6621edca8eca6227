"""What a run's steps cost: the ledger (rollverify/cost/ledger.py) and the trace
(rollverify/cost/trace.py), booked in three calls and nowhere else.

    phase(name)      a timed block outside the step's records (an evaluation, a checkpoint):
                     its seconds in the ledger, its engine steps priced and traced
    paused_rollout() the rollout a stop paused, before the checkpoint that keeps its tokens
    after_step()     once per optimizer step, from its records (training/records.py): its
                     phases, tokens and modeled cost in the ledger, its work in the trace

Rank 0's alone: the other ranks of a world book nothing (their phases are only timed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from rollverify.config import RunConfig
from rollverify.cost.ledger import CostLedger
from rollverify.cost.trace import EngineStep, StepTrace, drop_after
from rollverify.infra.atomic_write import atomic_write_text
from rollverify.rollout.engines.protocol import RolloutEngine
from rollverify.rollout.schedules import RolloutInterrupted
from rollverify.training.cost_settings import device_layout, run_pricing
from rollverify.training.records import BatchRecord, RunCounters, StepRecords


class Clock:
    """A timed block (`with Clock() as clock:`): `clock.seconds` once it ends, handed to
    `on_end`."""

    def __init__(self, on_end: Callable[[float], None] | None = None) -> None:
        self.on_end, self.seconds = on_end, 0.0

    def __enter__(self) -> Clock:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.seconds = time.perf_counter() - self.start
        if self.on_end is not None:
            self.on_end(self.seconds)


class Booking:
    def __init__(self, config: RunConfig, active: bool = True) -> None:
        """active: this process books (rank 0); elsewhere phase() only times its block."""
        self.config, self.active = config, active
        # What each step's work would cost on GPUs (rollverify/cost/costmodel/): modeled_* metrics.
        self.pricing = run_pricing(config)
        self.ledger = CostLedger(device_layout(config), modeled_gpus=self.pricing.layout.gpus)
        self.trace = StepTrace()  # written to RUN/trace/ with each checkpoint

    def phase(self, name: str, step: int = 0, engine: RolloutEngine | None = None) -> Clock:
        """A timed block, booked as the ledger's phase `name` as it ends (even if it fails: a
        checkpoint that could not be written took its time too); with `engine`, the engine
        steps it ran are priced and traced under `step`."""

        def book(seconds: float) -> None:
            self.ledger.add_phase(name, seconds)
            if engine is not None:
                steps = engine.take_trace()
                self.ledger.add_modeled({name: self.pricing.engines(steps)})
                self.trace.add_engine_steps(step, name, steps)

        return Clock(book if self.active else None)

    def paused_rollout(
        self, interrupted: RolloutInterrupted, steps: list[EngineStep], step: int
    ) -> None:
        """The rollout of `step` a stop paused: its time, tokens and engine steps."""
        self.ledger.add_phase("rollout", interrupted.seconds)
        self.ledger.add_modeled({"rollout": self.pricing.engines(steps)})
        self.trace.add_engine_steps(step, "rollout", steps)
        self.ledger.add_tokens(
            generated=interrupted.tokens_generated, regenerated=interrupted.tokens_regenerated
        )

    def after_step(
        self,
        step: int,
        records: StepRecords,
        generation: BatchRecord,
        counters: RunCounters,
    ) -> None:
        """The step's phases and tokens in the ledger, its device-seconds in `counters`, and
        its work priced on the configured GPUs (modeled_*) and traced. `generation`: the
        rollout batch it trained (this step's, or an earlier step's with
        train.updates_per_rollout > 1)."""
        batch, scoring, sync = records.batch, records.scoring, records.sync
        ledger = self.ledger
        rollout_seconds = batch.result.seconds if batch is not None else 0.0
        if records.overlap is not None:  # the engine beside the trainer: booked at once
            phases = {"verify": scoring.verify_seconds, "train": records.train_seconds}
            ledger.add_overlapped_step(*records.overlap, phases | {"sync": sync.seconds})
        elif batch is not None:  # the engines' wait for tool calls: a phase of its own
            tools = batch.tool_calls
            waited = min(tools.waited, rollout_seconds) if tools is not None else 0.0
            ledger.add_phase("rollout", rollout_seconds - waited)
            ledger.add_phase("tool", waited)
        if batch is not None and batch.tool_calls is not None:
            ledger.add_tool_cpu(batch.tool_calls.cpu_seconds)
        if records.overlap is None:
            # Scoring under the current policy: the method's own cost if it acts on the scores,
            # else measurement for the logs, left out of the run's cost.
            ledger.add_phase("verify", scoring.verify_seconds)
        ledger.add_measurement(scoring.measure_seconds)
        if batch is not None:
            result, keep, lengths = batch.result, batch.keep, batch.lengths
            ledger.add_tokens(
                generated=result.tokens_generated,
                regenerated=result.tokens_regenerated,
                kept=int(lengths[keep].sum()),
                discarded=int(lengths[~keep].sum())
                + result.dropped_tokens
                + result.dropped_stale_tokens,
            )
        if records.overlap is None:
            ledger.add_phase("train", records.train_seconds)
            ledger.add_phase("sync", sync.seconds)
        ledger.add_tokens(discarded=records.cache.tokens_truncated)
        counters.device_seconds += (
            rollout_seconds + records.train_seconds + sync.seconds + scoring.verify_seconds
        )
        trainer = records.trainer_step(
            generation,
            self.config.train.updates_per_rollout,
            beta=self.config.train.beta,
            weight_bytes=self.pricing.shape.weight_bytes,
        )
        engine_steps = batch.engine_steps if batch is not None else []
        ledger.add_modeled(self.pricing.step(engine_steps, trainer))
        self.trace.add_engine_steps(step, "sync", sync.engine_steps)  # the probe
        self.trace.add_engine_steps(step, "rollout", engine_steps)
        self.trace.add_trainer_step(step, trainer)

    def write_ledger(self, run_dir: Path | None) -> None:
        """RUN/ledger.json, current after every step."""
        if run_dir is not None:
            text = json.dumps(self.ledger.to_dict(), indent=2) + "\n"
            atomic_write_text(run_dir / "ledger.json", text)

    def flush_trace(self, run_dir: Path, step: int) -> None:
        """The trace of the steps up to `step`, to RUN/trace/ (with its checkpoint)."""
        self.trace.flush(run_dir / "trace", step)

    def resumed(self, run_dir: Path | None, step: int) -> None:
        """A run resumed from `step`: the steps past it are traced again by this run."""
        if run_dir is not None:
            drop_after(run_dir / "trace", step)
