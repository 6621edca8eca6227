"""A machine's own cost terms, fitted to what one of its runs timed (`rvctl calibrate RUN`).

The engine's terms are a `LinearStepCost` (cpu_profile.py), fitted to the iterations the run
timed in its trace (`seconds`; all but the first, which pays the engine's warm-up); on a GPU
the same terms read as the fixed overhead per iteration and the per-row and per-context costs
that the roofline's efficiency factors stand for.
The trainer's terms are fitted to the seconds the run logged per step (MLflow) against the
work its trace recorded for that step:

    train     train_overhead + train_per_token x tokens trained + train_per_attended x their
              contexts (forward and backward)
    scoring   score_per_token x tokens scored + score_per_attended x their contexts (forward
              only: verification and the logs' scoring)
    sync      sync_per_byte x the bytes of weights synced

Every term carries its fit error: the standard error of the coefficient (ordinary least squares
on the terms the non-negative fit kept; None for a term it set to 0), and each group its
relative RMS residual. A profile is a small JSON file (`save`, `load`), never a pickle.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from rollverify.cost.costmodel.cpu_profile import LinearStepCost, fit_terms, step_features
from rollverify.cost.costmodel.gpus import Efficiency, GPUProfile
from rollverify.cost.trace import EngineStep
from rollverify.infra.atomic_write import atomic_write_text

FORMAT = 1
TRAINER_TERMS = (
    "train_overhead",
    "train_per_token",
    "train_per_attended",
    "score_per_token",
    "score_per_attended",
    "sync_per_byte",
)


@dataclass(frozen=True)
class Term:
    name: str
    value: float  # seconds per unit of its feature
    error: float | None  # the coefficient's standard error (None: the fit set it to 0)


@dataclass(frozen=True)
class Profile:
    """A machine's fitted cost terms and where they came from."""

    machine: str
    source: str  # the run folder fitted
    engine: tuple[Term, ...]  # LinearStepCost's fields, in order
    trainer: tuple[Term, ...] = ()  # TRAINER_TERMS (empty: the run logged no timings)
    residual: dict[str, float] = field(default_factory=dict)  # group -> relative RMS residual
    samples: dict[str, int] = field(default_factory=dict)  # group -> rows fitted
    model: str = ""  # the run's model.path: the terms price that model's work only
    # What a device achieved (benchmarks/gpu_check.py): bandwidth (bytes/s of weights and KV
    # read per decode step), step_overhead (seconds per decode step besides that read),
    # forward_flops and train_flops (FLOP/s); over a GPU's peaks, the roofline's efficiency
    achieved: dict[str, float] = field(default_factory=dict)

    def efficiency(self, gpu: GPUProfile) -> Efficiency:
        """The roofline's efficiency factors this profile measured against `gpu`'s peaks (the
        published defaults for what it did not measure)."""
        got, default = self.achieved, Efficiency()
        return replace(
            default,
            bandwidth=got["bandwidth"] / gpu.bandwidth if "bandwidth" in got else default.bandwidth,
            forward_flops=got["forward_flops"] / gpu.peak_flops
            if "forward_flops" in got
            else default.forward_flops,
            train_flops=got["train_flops"] / gpu.peak_flops
            if "train_flops" in got
            else default.train_flops,
            step_overhead=got.get("step_overhead", default.step_overhead),
        )

    def step_cost(self) -> LinearStepCost:
        return LinearStepCost(*(t.value for t in self.engine))

    def has(self, name: str) -> bool:
        """Whether the profile fitted this trainer term (benchmarks/gpu_check.py times no
        weight sync: simulate then prices sync with its roofline)."""
        return any(t.name == name for t in self.trainer)

    def trainer_term(self, name: str) -> float:
        return next((t.value for t in self.trainer if t.name == name), 0.0)

    def train_seconds(self, tokens: float, attended: float) -> float:
        if tokens <= 0:
            return 0.0
        value = self.trainer_term
        return (
            value("train_overhead")
            + value("train_per_token") * tokens
            + (value("train_per_attended") * attended)
        )

    def score_seconds(self, tokens: float, attended: float) -> float:
        value = self.trainer_term
        return value("score_per_token") * tokens + value("score_per_attended") * attended

    def sync_seconds(self, weight_bytes: float) -> float:
        return self.trainer_term("sync_per_byte") * weight_bytes

    def rollout_seconds(self, steps: list[EngineStep]) -> float:
        """The engine's iterations priced by the profile, in sequence."""
        cost = self.step_cost()
        return sum(cost.iteration(s) for s in steps)

    def to_dict(self) -> dict:
        return {"format": FORMAT, **asdict(self)}

    def save(self, path: str | Path) -> None:
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path, option: str = "profile") -> Profile:
        """Read a profile; a missing or malformed one is a ValueError naming `option` (the flag
        or config field that gave the path) and what is wrong."""
        try:
            data = json.loads(Path(path).read_text())
        except OSError as error:
            raise ValueError(f"{option} {path}: cannot read it ({error.strerror})") from None
        except ValueError:
            raise ValueError(f"{option} {path}: not JSON; write one with rvctl calibrate") from None
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(
                f"{option} {path}: malformed ({error}); write one with rvctl calibrate"
            ) from None

    @classmethod
    def from_dict(cls, data: dict) -> Profile:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"format must be {FORMAT}")
        engine = tuple(_term(t) for t in data["engine"])
        names = [f.name for f in fields(LinearStepCost)]
        if [t.name for t in engine] != names:
            raise ValueError(f"engine terms must be {', '.join(names)}")
        trainer = tuple(_term(t) for t in data.get("trainer", ()))
        unknown = {t.name for t in trainer} - set(TRAINER_TERMS)
        if unknown:
            raise ValueError(f"unknown trainer terms {', '.join(sorted(unknown))}")
        return cls(
            machine=str(data["machine"]),
            source=str(data["source"]),
            engine=engine,
            trainer=trainer,
            residual={str(k): float(v) for k, v in data.get("residual", {}).items()},
            samples={str(k): int(v) for k, v in data.get("samples", {}).items()},
            model=str(data.get("model", "")),
            achieved=_achieved(data.get("achieved", {})),
        )


ACHIEVED = ("bandwidth", "step_overhead", "forward_flops", "train_flops")


def _achieved(data: dict) -> dict[str, float]:
    unknown = set(data) - set(ACHIEVED)
    if unknown:
        raise ValueError(f"unknown achieved figures {', '.join(sorted(unknown))}")
    figures = {str(k): float(v) for k, v in data.items()}
    bad = [k for k, v in figures.items() if not math.isfinite(v) or v < 0]
    if bad:
        raise ValueError(f"achieved {', '.join(bad)}: must be finite and >= 0")
    return figures


def _term(data: dict) -> Term:
    value, error = float(data["value"]), data["error"]
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"term {data['name']}: value {value} is not a cost (>= 0)")
    return Term(str(data["name"]), value, None if error is None else float(error))


def machine_name() -> str:
    """The device a run on this machine used: the GPU's name where torch sees one, else the
    CPU's model and core count."""
    import platform

    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    return f"{cpu} ({os.cpu_count()} cores)"


def fit_profile(run_dir: str | Path, machine: str | None = None) -> Profile:
    """Fit a profile to a run folder: its engine trace's timed rollout and evaluation
    iterations, and its trainer trace against the seconds it logged per step."""
    from rollverify.cost import trace

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"calibrate: {run_dir} is no run folder")
    if not (run_dir / "trace").is_dir():
        raise ValueError(
            f"calibrate: {run_dir} has no trace folder; pass a run folder that checkpointed "
            "(its trace is written with each checkpoint)"
        )
    rows = trace.read(run_dir / "trace").to_pylist()
    names = {f.name for f in fields(EngineStep)}
    timed = [EngineStep(**{k: v for k, v in r.items() if k in names}) for r in rows]
    timed = [s for s in timed if s.seconds > 0][1:]  # the first: warm-up (lazy initialisation)
    if len(timed) < len(fields(LinearStepCost)):
        raise ValueError(
            f"calibrate: {run_dir}'s trace times {len(timed)} engine iterations; the fit needs "
            f"at least {len(fields(LinearStepCost))} (vLLM's sidecar times none on some runs)"
        )
    features = [[f(s) for f in step_features()] for s in timed]
    values, errors, residual = fit_terms(features, [s.seconds for s in timed])
    engine = tuple(
        Term(f.name, v, e) for f, v, e in zip(fields(LinearStepCost), values, errors, strict=True)
    )
    profile_residual, samples = {"engine": residual}, {"engine": len(timed)}
    trainer = _fit_trainer(run_dir, profile_residual, samples)
    return Profile(
        machine=machine or machine_name(),
        source=str(run_dir.resolve()),
        engine=engine,
        trainer=trainer,
        residual=profile_residual,
        samples=samples,
        model=_model_of(run_dir),
    )


def _model_of(run_dir: Path) -> str:
    """The model.path of the run's saved config ("" where it saved none)."""
    import yaml

    try:
        return str(yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["path"])
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return ""


def _fit_trainer(run_dir: Path, residual: dict, samples: dict) -> tuple[Term, ...]:
    """The trainer's terms from the seconds the run logged per step (none: no terms)."""
    from rollverify.cost import trace

    seconds = _logged_seconds(run_dir)
    if not seconds:
        return ()
    work = {r["step"]: r for r in trace.read(run_dir / "trace", "trainer").to_pylist()}
    steps = sorted(s for s in work if s >= 1 and s in seconds.get("train_seconds", {}))
    if len(steps) < 3:
        return ()
    train = fit_terms(
        [[1.0, work[s]["tokens_trained"], work[s]["attended_trained"]] for s in steps],
        [seconds["train_seconds"][s] for s in steps],
    )
    scoring_steps = [s for s in steps if s in seconds.get("measure_seconds", {})]
    score = fit_terms(
        [
            [
                work[s]["tokens_scored"] + work[s]["tokens_measured"],
                work[s]["attended_scored"] + work[s]["attended_measured"],
            ]
            for s in scoring_steps
        ],
        [
            seconds["measure_seconds"][s] + seconds.get("verify_seconds", {}).get(s, 0.0)
            for s in scoring_steps
        ],
    )
    sync_steps = [s for s in steps if s in seconds.get("sync_seconds", {})]
    sync = fit_terms(
        [[work[s]["sync_bytes"]] for s in sync_steps],
        [seconds["sync_seconds"][s] for s in sync_steps],
    )
    residual |= {"train": train[2], "scoring": score[2], "sync": sync[2]}
    samples |= {"train": len(steps), "scoring": len(scoring_steps), "sync": len(sync_steps)}
    values = [*train[0], *score[0], *sync[0]]
    errors = [*train[1], *score[1], *sync[1]]
    return tuple(Term(n, v, e) for n, v, e in zip(TRAINER_TERMS, values, errors, strict=True))


def _logged_seconds(run_dir: Path) -> dict[str, dict[int, float]]:
    """The phase seconds a finished run logged per step ({} where it logged none)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(summary["tracking_uri"])
    out = {}
    for name in ("train_seconds", "measure_seconds", "verify_seconds", "sync_seconds"):
        history = client.get_metric_history(summary["run_id"], name)
        out[name] = {m.step: m.value for m in history if math.isfinite(m.value)}
    return out
