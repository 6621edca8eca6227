"""The compiled exact model (rollverify/rollout/engines/simulated_compiled.py, its kernel in
kernel/) against the Python engine it compiles (engines/simulated.py): the same
results, number for number, through the real schedules; the same prices; and what it refuses."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass

import pytest
import torch

from rollverify.config import load_config
from rollverify.cost.costmodel import GPUS, Layout, Pricing
from rollverify.cost.trace import EngineStep
from rollverify.experiments.simulate import simulate_one
from rollverify.experiments.simulate_settings import LengthModel, Settings
from rollverify.rollout.engines import kernel
from rollverify.rollout.engines.simulated import SimulatedEngine
from rollverify.rollout.engines.simulated_compiled import CompiledSimulatedEngine
from rollverify.rollout.engines.sketch import Sketch
from rollverify.rollout.schedules import PromptGroup, RolloutState, collect
from rollverify.rollout.trajectory import Trajectory
from tests.cli import run_rvctl
from tests.test_kv_cache import PAPER, PRICING, QWEN3_8B

STEPS = 4


@pytest.mark.parametrize(
    "overrides, settings, method, context, preempts",
    [
        ({}, {}, "partial", 8192, True),  # the paper's setting: a full cache, churning
        ({}, {}, "rollverify", 65536, True),
        ({"vllm.gpu_memory_utilization": 0.5}, {}, "grpo", 8192, True),
        ({}, {"lengths": LengthModel(end_median=4000.0)}, "partial", 8192, True),  # moving
        ({}, {"finishes_per_poll": 1}, "rollverify", 8192, True),
        ({"vllm.tensor_parallel_size": 2}, {}, "partial", 65536, False),  # all-reduces priced
        ({"rollout.slots": 256}, {"kv_cache": False}, "partial", 8192, False),  # no limit
    ],
)
def test_the_compiled_engine_gives_the_python_engines_results(
    overrides, settings, method, context, preempts
):
    """A few steps of the paper's setting, with either engine: every figure of the run equal
    (GPU seconds by phase, tokens, preemptions, recomputed tokens, truncations, the switch)."""
    config = load_config(PAPER, overrides)
    results = [
        asdict(
            simulate_one(
                config,
                Settings((method,), (context,), steps=STEPS, compiled=compiled, **settings),
                method,
                context,
                0,
            )
        )  # fmt: skip
        for compiled in (True, False)
    ]
    assert results[0] == results[1]
    assert (results[0]["preemptions"] > 1000) == preempts  # the full cache's events, or none


@dataclass(frozen=True)
class _Group(PromptGroup):
    def samples(self, group_size: int) -> list[Trajectory]:
        return [Sketch(self.prompt_ids, self.group_id, i) for i in range(group_size)]


class _Source:
    """Groups with prompts of random lengths (the same for both engines)."""

    def __init__(self, seed: int) -> None:
        self.rng, self.next_id = random.Random(seed), 0

    def next_group(self) -> PromptGroup:
        prompt = torch.zeros(self.rng.randint(1, 40), dtype=torch.long)
        self.next_id += 1
        return _Group(self.next_id - 1, prompt, answer="")


def _run(engine, case: random.Random, steps: int, partial: bool) -> list:
    """`steps` rollouts of the schedule, truncating cached trajectories between them as
    verification does; what each step trained and what the engine counted."""
    source, state, seen = _Source(case.random()), RolloutState(), []
    cut = random.Random(case.random())
    for version in range(1, steps + 1):
        result = collect(engine, source, state, batch_groups=3, group_size=4, partial=partial)
        seen.append([(t.key, len(t), t.finish_reason) for t in result.trajectories()])
        for trajectory in state.cache:
            trajectory.truncate(cut.randint(0, len(trajectory)))
        engine.load_weights([], version=version)
    return [seen, asdict(engine.stats), engine.clock, engine.prefill_seconds, engine.step]


def test_random_small_engines_give_the_same_rollouts():
    """Small random engines (a few slots, caches of a few blocks of 4 tokens, short budgets),
    each schedule for a few steps: the same batches, counts and clock."""
    rng = random.Random(5)
    for case in range(60):
        params = dict(
            slots=rng.randint(1, 12),
            max_new_tokens=rng.randint(4, 80),
            admit_batch=rng.randint(1, 4),
            finishes_per_poll=rng.choice([1, 2, 4]),
            kv_tokens=rng.choice([None, rng.randrange(160, 600, 4)]),
            block_size=4,
        )
        lengths = {}

        def drawn(group: int, index: int, lengths=lengths, seed=case) -> int:
            return lengths.setdefault(
                (group, index), random.Random(seed * 1000 + group).randint(1, 90)
            )

        partial, state = rng.random() < 0.7, rng.random()
        runs = [
            _run(engine(PRICING, lengths=drawn, **params), random.Random(state), 4, partial)
            for engine in (CompiledSimulatedEngine, SimulatedEngine)
        ]
        assert runs[0] == runs[1], (case, params)


def test_the_kernels_prices_are_the_cost_models():
    """decode_run and prefill, evaluated in the same order as the roofline: equal to the last
    bit, with tensor parallelism's all-reduces and without."""
    rng = random.Random(1)
    for layout in (Layout("disaggregated", 1, 4), Layout("disaggregated", 2, 3, 2)):
        pricing = Pricing(QWEN3_8B, GPUS["h100"], layout)
        terms = kernel.price_terms(pricing)
        for _ in range(200):
            rows, context, steps = rng.randint(0, 2000), rng.randint(0, 10**8), rng.randint(0, 9000)
            decode = pricing.decode_run(rows, context, context, steps)
            assert kernel.decode_run(terms, rows, context, steps) == decode
            tokens = rng.randint(0, 10**6)
            attended = tokens * rng.randint(0, 70000)
            admitted = EngineStep(0, 0, rng.randint(1, 256), tokens, attended)
            assert kernel.prefill(terms, tokens, attended) == pricing.iteration(admitted)


def test_it_refuses_what_only_the_python_engine_does():
    engine = CompiledSimulatedEngine(PRICING, 4, 64, lambda g, i: 10, kv_tokens=400)
    with pytest.raises(TypeError, match="Sketches without tool calls"):
        engine.submit([Trajectory(torch.zeros(3, dtype=torch.long), 0, 0)])
    called = Sketch(torch.zeros(3, dtype=torch.long), 0, 0, tool_outputs=[(0, 5)])
    with pytest.raises(TypeError, match="Sketches without tool calls"):
        engine.submit([called])
    done = Sketch(torch.zeros(3, dtype=torch.long), 0, 1)
    done.finish_reason = "stop"
    with pytest.raises(ValueError, match="is finished"):
        engine.submit([done])
    engine.submit([Sketch(torch.zeros(3, dtype=torch.long), 1, 0)])
    with pytest.raises(RuntimeError, match="pause the engine"):
        engine.load_weights([], version=1)
    assert [t.key for t in engine.pause()] == [(1, 0)]


def test_rvctl_simulate_runs_the_compiled_engine_unless_told_the_reference(monkeypatch, capsys):
    """The default table is the compiled engine's; `--reference` runs the Python one: the
    same table."""
    args = ["simulate", "-c", PAPER, "--methods", "partial", "--steps", "2", "--workers", "1"]
    built = []
    original = CompiledSimulatedEngine.__init__

    def counted(engine, *a, **k):
        built.append(engine)
        original(engine, *a, **k)

    monkeypatch.setattr(CompiledSimulatedEngine, "__init__", counted)
    tables = []
    for flag in ([], ["--reference"]):
        done = run_rvctl([*args, *flag, "-f", "json"], monkeypatch, capsys)
        assert done.returncode == 0, done.stderr
        tables.append(json.loads(done.stdout))
        assert len(built) == 1  # the first run only
    assert tables[0] == tables[1]
