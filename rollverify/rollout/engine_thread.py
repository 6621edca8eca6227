"""The engine driven from a thread of its own beside the trainer (rollout.mode async,
rollout.lockstep false): it generates all the time, the trainer takes B groups as soon as they
are complete, and each update lands between two of the engine's steps whenever the trainer
sends it. On vLLM a step is a poll of the sidecars, which generate in their own processes.

The engine thread owns the engine; the trainer's thread owns the model being trained. They
meet in `AsyncState` (under one lock) and in three hand-overs:
- weights: a copy of the trainer's new weights, queued; the engine thread loads each in turn
  at its next step boundary (the engine's load_weights_in_flight) and runs the probe check;
- cut trajectories: verification truncated them (on the trainer); the engine thread submits
  them again to regenerate their suffixes;
- a hold: for a checkpoint or an evaluation the trainer parks the engine thread at a step
  boundary and takes its work out (AsyncState.in_flight), which it submits again when let go.
One thread at a time is inside the engine (on vLLM, a second caller of the sidecars' actors
would race the first): whoever enters it holds `in_engine`, the engine thread for each of its
steps, the trainer for what it reads meanwhile (the trace, the engine's counts).
Admission follows the staleness bound as in lock-step (rollout/async_rollout.py). torch
releases the GIL in its kernels, so the engine's forward passes run beside the trainer's
(one core each with train.threads 1). When an update lands depends on timing, so a run is not
reproducible step for step; a stop, a kill or a resume loses nothing and trains nothing twice.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rollverify.core.staleness_bound import may_start
from rollverify.infra.kill_points import kill_point
from rollverify.rollout.async_rollout import (
    AsyncState,
    admit,
    batch_out_of_play,
    ready_batch,
    verify_once,
)
from rollverify.rollout.engines.protocol import EngineLost
from rollverify.rollout.schedules import PromptSource, RolloutInterrupted, RolloutResult
from rollverify.rollout.trajectory import Trajectory

Weights = list  # [(name, tensor)]: a copy, the trainer trains on


class EngineThread:
    def __init__(
        self,
        engine,
        source: PromptSource,
        state: AsyncState,
        *,
        batch_groups: int,
        group_size: int,
        eta: int,
        keep_kv: bool,
        in_start_order: bool = False,
    ) -> None:
        self.engine, self.source, self.state = engine, source, state
        self.in_start_order = in_start_order  # rollout.batch_order: start
        self.batch_groups, self.group_size, self.eta = batch_groups, group_size, eta
        self.admit_eta = eta  # 0 once verification switched the run to synchronous
        self.keep_kv = keep_kv
        self.version = engine.version  # the trainer's policy (its last update sent)
        self._training = False  # a batch is out: the trainer trains version + 1 next
        self._busy: list[tuple[float, float]] = []  # (start, end) of its steps and loads
        state.tokens_since_last_batch(engine)  # (starts the count, if this is the first)
        self.last_gap: float | None = None  # the probe check of the last update it loaded
        self._lock = threading.Condition(threading.Lock())
        # Held inside the engine, by either thread; taken after `_lock` or alone: never held
        # while waiting for `_lock` (the engine thread holds `_lock` as it waits for it).
        self.in_engine = threading.RLock()
        self._weights: deque[tuple[int, Weights, Callable]] = deque()
        self._cut: list[Trajectory] = []
        self._hold = self._parked = self._closing = self._stopped = False
        self._trace: list = []  # the engine's steps taken out of its trace by a hold
        self._error: BaseException | None = None
        self._lost: EngineLost | None = None  # the engine, lost for good in its thread
        self._thread = threading.Thread(target=self._run, name="rollverify-engine", daemon=True)
        self._thread.start()

    # -- the trainer's side -------------------------------------------------------------------

    def next_batch(
        self,
        *,
        verify: Callable[[list[Trajectory], int], list[Trajectory]] | None,
        admit_eta: int,
        should_stop: Callable[[], bool],
    ) -> RolloutResult:
        """B groups for the trainer at `self.version`, waiting for the engine as long as the
        bound needs (rollout/async_rollout.py's next_batch, with the engine in its thread)."""
        start = time.perf_counter()
        with self._lock:
            self.admit_eta = admit_eta
            self._lock.notify_all()
            while True:
                self._pause_lost_engine()
                if self._lost is not None:  # the run stops after its checkpoint (EngineLost)
                    with self.in_engine:
                        counts = self.state.tokens_since_last_batch(self.engine, hand_out=True)
                    raise RolloutInterrupted(time.perf_counter() - start, *counts, lost=self._lost)
                self._raise_error()
                if not self._thread.is_alive():  # (never without an error; never hang)
                    raise RuntimeError("the engine thread stopped")
                if should_stop():
                    self._take_out_locked()
                    self._stopped = True  # parked for good: the run ends
                    with self.in_engine:
                        counts = self.state.tokens_since_last_batch(self.engine, hand_out=True)
                    raise RolloutInterrupted(time.perf_counter() - start, *counts)
                chosen = ready_batch(
                    self.state,
                    self.version,
                    self.eta,
                    self.batch_groups,
                    self.group_size,
                    self.in_start_order,
                )
                if chosen is not None and verify is not None:
                    self._lock.release()  # the trainer scores while the engine generates
                    try:
                        cut = verify_once(self.state, chosen, self.version, verify)
                    finally:
                        self._lock.acquire()
                    if cut:
                        self._cut += cut
                        self._lock.notify_all()
                        continue
                if chosen is not None:
                    break
                if self._stalled():
                    raise RuntimeError(
                        f"async rollout stalled at version {self.version}: nothing running, "
                        "nothing admissible, and no weights on the way"
                    )
                if self._parked and not self._hold and self._has_work():
                    self._lock.notify_all()  # (never needed so far: a wake-up cannot be lost)
                self._lock.wait(timeout=0.5)
            self._training = True  # admission counts the next version from now on
            with self.in_engine:
                counts = self.state.tokens_since_last_batch(self.engine, hand_out=True)
            return batch_out_of_play(self.state, chosen, start, *counts)

    def send_weights(self, weights: Weights, version: int, check: Callable) -> None:
        """The trainer's weights of `version` (a copy), to land at the engine's next step
        boundary; `check(engine)` runs right after (the probe check), its result `last_gap`."""
        with self._lock:
            self._weights.append((version, weights, check))
            self.version, self._training = version, False
            self._lock.notify_all()

    @contextmanager
    def held(self) -> Iterator[None]:
        """The engine thread parked at a step boundary, its work out in `state.in_flight`:
        the engine is the caller's (an evaluation's, a checkpoint's) until the block ends."""
        with self._lock:
            self._take_out_locked()
        try:
            yield
        finally:
            with self._lock:
                self._hold = False
                self._lock.notify_all()

    def take_busy(self) -> list[tuple[float, float]]:
        """The (start, end) perf_counter times of the engine's steps since the last call."""
        with self._lock:
            busy, self._busy = self._busy, []
        return busy

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._thread.join()

    def take_trace(self) -> list:
        """The engine's steps since the last call (those before a hold too, not the hold's)."""
        with self.in_engine:  # (`_trace` is the trainer's alone: holds are its)
            trace, self._trace = self._trace + self.engine.take_trace(), []
        return trace

    def _pause_lost_engine(self) -> None:
        """The engine lost for good in its thread (which has ended): its work out, as a stop's
        pause, whichever call of the trainer's meets it first; the next batch raises it. The
        updates on their way stay the trainer's (its checkpoint holds them): none is sent to
        the lost engine."""
        if not isinstance(self._error, EngineLost):
            return
        self._lost, self._error, self._stopped, self._weights = self._error, None, True, deque()
        with self.in_engine:
            self._work_out()

    def _take_out_locked(self) -> None:
        """Park the engine thread; then, the engine being the trainer's: land the updates on
        their way (an evaluation must see the policy it is logged under), keep the trace of
        its steps so far for the next batch, and take its work out."""
        self._hold = True
        self._lock.notify_all()
        while not self._parked and self._error is None:
            self._lock.wait()
        self._pause_lost_engine()  # (an evaluation or a checkpoint met it: theirs to go on)
        self._raise_error()
        with self.in_engine:  # (parked: the engine thread is out of it)
            self._land_weights()
            self._work_out()

    def _work_out(self) -> None:
        """The engine's work out into `state.in_flight`, what verification cut with it, and
        the trace of its steps so far kept for the next batch (the caller owns the engine)."""
        self._trace += self.engine.take_trace()
        self.state.in_flight += self._cut
        self._cut = []
        self.state.take_out(self.engine)

    def _land_weights(self) -> None:
        """Load the updates on their way (the caller owns the engine)."""
        weights, self._weights = list(self._weights), deque()
        self._load(weights)

    def _load(self, weights: list[tuple[int, Weights, Callable]]) -> None:
        """Each update in turn, between two tokens, then its probe check."""
        for version, named_tensors, check in weights:
            self.engine.load_weights_in_flight(named_tensors, version, not self.keep_kv)
            self.last_gap = check(self.engine)

    def _stalled(self) -> bool:
        return self._parked and not self._hold and not self._has_work()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error  # (raised in the engine thread: its traceback says where)

    # -- the engine thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._step():
                pass
        except BaseException as error:  # handed to the trainer at its next call
            with self._lock:
                self._error, self._parked = error, True
                self._lock.notify_all()

    def _step(self) -> bool:
        """One engine step: land the updates that arrived, admit, generate. False: closing."""
        with self._lock:
            while not self._closing and (self._hold or self._stopped or not self._has_work()):
                self._parked = True
                self._lock.notify_all()
                self._lock.wait()
            self._parked = False
            if self._closing:
                return False
            weights, self._weights = list(self._weights), deque()
            regenerating = self.version + 1 if self._cut else None  # (the step waiting for it)
            with self.in_engine:
                self.engine.submit(self.state.in_flight + self._cut)  # first, in order
                self.state.in_flight, self._cut = [], []
                self._admit()
        started = time.perf_counter()
        with self.in_engine:  # (not `_lock`: the trainer takes its batches meanwhile)
            self._load(weights)
            finished = self.engine.poll() if self.engine.has_work else []
        ended = time.perf_counter()
        if regenerating is not None:  # tests: killed with cut trajectories regenerating
            kill_point("regenerating", regenerating)
        with self._lock:
            self._busy.append((started, ended))
            for trajectory in finished:
                self.state.finished[trajectory.group_id].append(trajectory)
            self._lock.notify_all()
        return True

    def _has_work(self) -> bool:
        if self._weights or self._cut or self.state.in_flight:
            return True
        with self.in_engine:
            return self.engine.has_work or (self.engine.idle_slots() > 0 and self._may_start())

    @property
    def _trains_next(self) -> int:
        """The version the trainer trains next: one past its policy once a batch is out."""
        return self.version + self._training

    def _may_start(self) -> bool:
        in_play = len(self.state.start_versions)
        return may_start(
            in_play, self.engine.version, self._trains_next, self.admit_eta, self.batch_groups
        )

    def _admit(self) -> None:
        admit(self.engine, self.source, self.state, self._trains_next, self.admit_eta,
              self.batch_groups, self.group_size)  # fmt: skip
