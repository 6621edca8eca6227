"""Tool calls on the simulated engine (rollverify/cost/tool_latency.py): a response leaves the
engine at each call and comes back when the tool answers, so calls lengthen a batch's tail."""

from __future__ import annotations

import torch

from rollverify.config import load_config
from rollverify.cost.costmodel import GPUS, Layout, ModelShape, Pricing
from rollverify.cost.tool_latency import ToolCallModel
from rollverify.experiments.simulate import simulate
from rollverify.experiments.simulate_results import rows
from rollverify.experiments.simulate_settings import Settings
from rollverify.rollout.engines.simulated import SimulatedEngine, Sketch

PRICING = Pricing(ModelShape.of("Qwen/Qwen3-8B-Base"), GPUS["h100"], Layout("colocated", 1))
LENGTHS = {(g, i): 200 + 150 * g + 40 * i for g in range(4) for i in range(4)}


def engine(tools: ToolCallModel | None) -> SimulatedEngine:
    return SimulatedEngine(
        PRICING,
        slots=8,
        max_new_tokens=2000,
        lengths=lambda group, index: LENGTHS[(group, index)],
        tool_calls=tools.sampler(seed=0) if tools else None,
    )


def sketches() -> list[Sketch]:
    return [Sketch(torch.zeros(32, dtype=torch.long), g, i) for g, i in LENGTHS]


def run(simulated: SimulatedEngine, trajectories: list[Sketch]) -> list[Sketch]:
    simulated.submit(trajectories)
    finished = []
    while simulated.has_work:
        finished += simulated.poll()
    return finished


def test_each_response_calls_where_its_draw_says_and_ends_at_its_length_later():
    tools = ToolCallModel(per_1k=5.0, median_s=2.0, sigma=0.5, output_tokens=16)
    plain, calling = engine(None), engine(tools)
    run(plain, sketches())
    trajectories = sketches()
    finished = run(calling, trajectories)
    assert sorted(t.key for t in finished) == sorted(LENGTHS)
    sampler = tools.sampler(seed=0)
    for trajectory in trajectories:
        assert trajectory.finished and len(trajectory) == LENGTHS[trajectory.key]
        calls = sampler(*trajectory.key, LENGTHS[trajectory.key])
        assert [after for after, _ in trajectory.tool_outputs] == [p for p, _ in calls]
        assert trajectory.context_length == 32 + len(trajectory) + 16 * len(calls)
    made = sum(len(t.tool_outputs) for t in trajectories)
    assert made > 0 and calling.calls_made == made
    # the same tokens decoded, but responses wait on their tools: the rollout ends later
    assert calling.stats.tokens_generated == plain.stats.tokens_generated
    assert calling.clock > plain.clock + tools.median_s / 2


def test_a_pause_waits_for_the_calls_in_flight_and_keeps_their_output():
    tools = ToolCallModel(per_1k=20.0, median_s=5.0, sigma=0.0, output_tokens=8)
    calling = engine(tools)
    trajectories = sketches()
    calling.submit(trajectories)
    while calling.has_work and not calling._tools:
        calling.poll()
    assert calling._tools, "some responses are waiting for their calls"
    waiting = [entry[2] for entry in calling._tools]
    answered_by = max(entry[0] for entry in calling._tools)
    paused = calling.pause()
    assert not calling.has_work and calling.clock >= answered_by
    assert {t.key for t in waiting} <= {t.key for t in paused}
    assert all(t.tool_outputs and t.tool_outputs[-1][0] == len(t) for t in waiting)
    # resumed, they go on from there: each ends at its length, each call made once
    finished = run(calling, [t for t in paused if not t.finished])
    sampler = tools.sampler(seed=0)
    for trajectory in finished:
        calls = sampler(*trajectory.key, LENGTHS[trajectory.key])
        assert [after for after, _ in trajectory.tool_outputs] == [p for p, _ in calls]


def test_simulate_prices_the_wait_and_counts_the_calls():
    config = load_config("experiments/qwen3-8b-dapo-math.yaml")
    base = Settings(methods=("grpo", "partial"), steps=3, contexts=(8192,))
    slow = ToolCallModel(per_1k=2.0, median_s=20.0, sigma=0.5, output_tokens=64)
    fast = ToolCallModel(per_1k=2.0, median_s=0.1, sigma=0.5, output_tokens=64)
    by = {}
    for name, tools in [("none", None), ("fast", fast), ("slow", slow)]:
        settings = Settings(**{**base.__dict__, "tool_calls": tools})
        by[name] = {row["method"]: row for row in rows(simulate(config, settings))}
    assert by["none"]["grpo"]["tool_calls"] == 0 < by["slow"]["grpo"]["tool_calls"]
    assert by["fast"]["grpo"]["tool_calls"] == by["slow"]["grpo"]["tool_calls"]  # same draws
    # a slower tool keeps a batch's responses out longer: grpo's rollout takes longer
    assert by["none"]["grpo"]["modeled_gpu_days"] < by["fast"]["grpo"]["modeled_gpu_days"]
    assert by["fast"]["grpo"]["modeled_gpu_days"] < by["slow"]["grpo"]["modeled_gpu_days"]
