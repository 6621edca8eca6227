"""GPU-day accounting: what a run cost, phase by phase, in device-seconds.

A run holds `trainer + engines` devices for its whole wall time (GPUs; on CPU a device is a
process holding cores). Each phase occupies some of them; the rest wait, and that waiting is
the `idle` phase. So the phases (idle included) always add up to wall seconds x devices held:

    phase      occupies
    rollout    the engines (hf: the trainer process, which runs the engine)
    tool       the engines, idle: every response in them waits for a tool call's answer
    eval       the engines (hf: the trainer)
    train      the trainer
    verify     the trainer (it scores the cache under the new policy)
    sync       both (weights travel from the trainer to the engines)
    checkpoint all (the trainer writes; the engines wait)

Asynchronous training with the engine beside the trainer (rollout.lockstep false: a thread of
its own, one device here) books a step at once (`add_overlapped_step`): the engines' busy
seconds as rollout, the trainer's phases as theirs, the rest of the step's wall times the
devices held as idle; `overlap` keeps the wall seconds both were busy at once and each side's
busy seconds, for the idle shares.

Tool calls run on the host's CPUs, beside the engines: their CPU seconds (`tool_cpu_seconds`,
the calls' threads and sandboxed programs) are not device time and are kept apart; the
engines' wait for them, when nothing else is left to decode, is the `tool` phase.

Engine start-up and model loading are not counted (once per run, not per step). Tokens: the
engine generated them; trained ones are kept; discarded ones were truncated by verification
or filtered out; regenerated ones were generated again after a truncation.

Beside the measured device-seconds (CPU process-seconds on a CPU: nothing a GPU user can
price), the ledger sums what the same work would cost on GPUs: the cost model
(rollverify/cost/costmodel/) applied to each step's trace gives modeled seconds per phase, and
`modeled_gpu_days` = modeled wall seconds x the GPUs of the modeled layout / 86,400.

Measurement is not a method's cost: scoring done only to log a metric (the OPS of a batch the
method does not filter by, the cache of a method that does not verify) is booked with
`add_measurement`, kept apart (`cost_measure_device_seconds`) and left out of the wall
seconds, the total and GPU-days, so that a speedup compares methods, not instrumentation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rollverify.tracking import metric_names as m
from rollverify.tracking.metric_names import MEASURE, MODELED_PHASES, PHASES, TOKEN_KINDS

SECONDS_PER_DAY = 86_400.0
OVERLAP = ("wall", "engines", "trainer", "both")


@dataclass(frozen=True)
class DeviceLayout:
    """The devices a run holds (a run's: rollverify/training/cost_settings.py)."""

    trainer: int = 1  # devices the trainer holds
    engines: int = 0  # devices the rollout engines hold; 0: the engine runs in the trainer

    @property
    def held(self) -> int:
        return self.trainer + self.engines

    def occupied(self, phase: str) -> int:
        if phase in ("rollout", "tool", "eval"):
            return self.engines or self.trainer
        if phase in ("train", "verify"):
            return self.trainer
        if phase in ("sync", "checkpoint"):
            return self.held
        raise ValueError(f"unknown phase {phase!r}; one of {PHASES}")


@dataclass
class CostLedger:
    layout: DeviceLayout
    wall_seconds: float = 0.0
    device_seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys((*PHASES, "idle", MEASURE), 0.0)
    )
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KINDS, 0))
    tool_cpu_seconds: float = 0.0  # host CPU of the tool calls (not device time)
    modeled_gpus: int = 0  # GPUs of the modeled layout (0: nothing modeled)
    modeled_seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(MODELED_PHASES, 0.0)
    )
    # steps booked overlapped: their wall, the engines' and the trainer's busy seconds, and
    # the seconds both were busy at once
    overlap: dict[str, float] = field(default_factory=lambda: dict.fromkeys(OVERLAP, 0.0))

    def add_overlapped_step(
        self,
        wall: float,
        engine_busy: float,
        trainer_busy: float,
        both: float,
        trainer_phases: dict[str, float],
    ) -> None:
        """A step of `wall` seconds in which the engines were busy `engine_busy` seconds, the
        trainer `trainer_busy` (its phases: train, verify, sync; and measurement, booked
        apart), `both` of them at once."""
        layout = self.layout
        booked = engine_busy * layout.engines
        self.device_seconds["rollout"] += booked
        for phase, seconds in trainer_phases.items():
            self.device_seconds[phase] += seconds * layout.trainer
            booked += seconds * layout.trainer
        self.device_seconds["idle"] += max(0.0, wall * layout.held - booked)
        self.wall_seconds += wall
        for key, value in zip(OVERLAP, (wall, engine_busy, trainer_busy, both), strict=True):
            self.overlap[key] += value

    def add_phase(self, phase: str, seconds: float) -> None:
        occupied = self.layout.occupied(phase)
        self.device_seconds[phase] += seconds * occupied
        self.device_seconds["idle"] += seconds * (self.layout.held - occupied)
        self.wall_seconds += seconds

    def add_tool_cpu(self, seconds: float) -> None:
        self.tool_cpu_seconds += seconds

    def add_measurement(self, seconds: float) -> None:
        """Trainer seconds spent scoring only to log a metric (not counted in the total)."""
        self.device_seconds[MEASURE] += seconds * self.layout.trainer

    def add_modeled(self, seconds: dict[str, float]) -> None:
        """Modeled GPU wall seconds of some work, by phase (costmodel/pricing.py)."""
        for phase, value in seconds.items():
            self.modeled_seconds[phase] += value

    @property
    def modeled_wall_seconds(self) -> float:
        return sum(s for phase, s in self.modeled_seconds.items() if phase != MEASURE)

    def add_tokens(self, **counts: int) -> None:
        for kind, count in counts.items():
            self.tokens[kind] += int(count)

    @property
    def total_device_seconds(self) -> float:
        return sum(s for phase, s in self.device_seconds.items() if phase != MEASURE)

    def metrics(self) -> dict[str, float]:
        """Cumulative figures, under the names rollverify/tracking/metric_names.py builds."""
        out = {m.cost_device_seconds(phase): s for phase, s in self.device_seconds.items()}
        out |= {m.tokens_total(kind): float(n) for kind, n in self.tokens.items()}
        total = self.total_device_seconds
        out |= {
            m.COST_DEVICE_SECONDS: total,
            m.COST_DEVICE_DAYS: total / SECONDS_PER_DAY,
            m.COST_WALL_SECONDS: self.wall_seconds,
            m.COST_TOOL_CPU_SECONDS: self.tool_cpu_seconds,
        }
        wall, engines, trainer, both = (self.overlap[k] for k in OVERLAP)
        if wall > 0:
            out |= {
                m.COST_OVERLAP_SECONDS: both,
                m.COST_ENGINE_IDLE_SHARE: max(0.0, 1 - engines / wall),
                m.COST_TRAINER_IDLE_SHARE: max(0.0, 1 - trainer / wall),
            }
        if not self.modeled_gpus:
            return out
        out |= {m.modeled_seconds(phase): s for phase, s in self.modeled_seconds.items()}
        return out | {
            m.MODELED_WALL_SECONDS: self.modeled_wall_seconds,
            m.MODELED_GPU_DAYS: self.modeled_gpu_days,
        }

    @property
    def modeled_gpu_days(self) -> float:
        return self.modeled_wall_seconds * self.modeled_gpus / SECONDS_PER_DAY

    def to_dict(self) -> dict:
        return {
            "layout": {"trainer": self.layout.trainer, "engines": self.layout.engines},
            "wall_seconds": self.wall_seconds,
            "device_seconds": dict(self.device_seconds),
            "tokens": dict(self.tokens),
            "tool_cpu_seconds": self.tool_cpu_seconds,
            "device_days": self.total_device_seconds / SECONDS_PER_DAY,
            "modeled_gpus": self.modeled_gpus,
            "modeled_seconds": dict(self.modeled_seconds),
            "modeled_gpu_days": self.modeled_gpu_days,
            "overlap": dict(self.overlap),
        }

    def state_dict(self) -> dict:
        """JSON-able: everything needed to continue counting where the ledger stopped."""
        return self.to_dict()

    def load_state_dict(self, state: dict) -> None:
        restored = CostLedger.from_dict(state)
        self.layout, self.wall_seconds = restored.layout, restored.wall_seconds
        self.device_seconds, self.tokens = restored.device_seconds, restored.tokens
        self.tool_cpu_seconds = restored.tool_cpu_seconds
        self.modeled_gpus, self.modeled_seconds = restored.modeled_gpus, restored.modeled_seconds
        self.overlap = restored.overlap

    @classmethod
    def from_dict(cls, data: dict) -> CostLedger:
        return cls(
            DeviceLayout(**data["layout"]),
            data["wall_seconds"],
            dict.fromkeys((*PHASES, "idle", MEASURE), 0.0)
            | {k: float(v) for k, v in data["device_seconds"].items()},
            {k: int(v) for k, v in data["tokens"].items()},
            float(data.get("tool_cpu_seconds", 0.0)),  # (ledgers from before tools)
            int(data.get("modeled_gpus", 0)),  # ledgers written before the cost model: none
            dict.fromkeys(MODELED_PHASES, 0.0)
            | {k: float(v) for k, v in data.get("modeled_seconds", {}).items()},
            dict.fromkeys(OVERLAP, 0.0) | data.get("overlap", {}),  # (ledgers from before)
        )
