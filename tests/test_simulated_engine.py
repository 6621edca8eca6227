"""The simulated engine is the in-process engine's schedule on a virtual clock: fed the lengths
the real engine produced, the real rollout schedules form the same groups, pause and resume
the same trajectories and count the same tokens (rollverify/rollout/engines/simulated.py)."""

from __future__ import annotations

import pytest

from rollverify.cost.costmodel import GPUS, Layout, ModelShape, Pricing, decode_step_seconds
from rollverify.rollout.engines.hf_engine import HFEngine
from rollverify.rollout.engines.simulated import SimulatedEngine
from rollverify.rollout.schedules import RolloutState, collect
from rollverify.rollout.trajectory import Trajectory
from tests.test_rollout import Source
from tests.tiny import EOS, PAD, random_model

B, G, SLOTS, BUDGET = 3, 4, 8, 60
PRICING = Pricing(ModelShape.of("Qwen/Qwen3-8B-Base"), GPUS["h100"], Layout("colocated", 1))


def schedule(engine, steps: int, partial: bool) -> list[dict]:
    """What each step of the real schedule did, and the final cache."""
    source, state, record = Source(), RolloutState(), []
    for version in range(1, steps + 1):
        result = collect(engine, source, state, batch_groups=B, group_size=G, partial=partial)
        record.append(
            {
                "groups": [g[0].group_id for g in result.groups],
                "lengths": [[len(t) for t in g] for g in result.groups],
                "versions": [[t.versions.tolist() for t in g] for g in result.groups],
                "resumed": result.resumed,
                "paused": result.paused,
                "generated": result.tokens_generated,
                "cache": sorted((t.key, len(t), t.finished) for t in state.cache),
            }
        )
        weights = engine.model.state_dict().items() if isinstance(engine, HFEngine) else []
        engine.load_weights(weights, version=version)  # a policy update between steps
    return record


def final_lengths(engine_record: list[dict]) -> dict[tuple[int, int], int]:
    lengths = {}
    for step in engine_record:
        for group, members in zip(step["groups"], step["lengths"], strict=True):
            for index, length in enumerate(members):
                lengths[(group, index)] = length
        for key, length, finished in step["cache"]:
            if finished:
                lengths[key] = length
    return lengths


@pytest.mark.parametrize("partial", [False, True])
def test_fed_the_real_lengths_the_schedule_does_exactly_what_it_did(partial):
    real = HFEngine(
        random_model(eos_bias=-2.5), slots=SLOTS, max_new_tokens=BUDGET, eos_token_id=EOS,
        pad_token_id=PAD, seed=0,
    )  # fmt: skip
    steps = 6
    expected = schedule(real, steps, partial)
    lengths = final_lengths(expected)  # unknown (never finished): the budget, i.e. not yet
    simulated = SimulatedEngine(
        PRICING,
        slots=SLOTS,
        max_new_tokens=BUDGET,
        lengths=lambda g, i: lengths.get((g, i), BUDGET),
    )
    got = schedule(simulated, steps, partial)
    assert got == expected
    if partial:
        assert sum(step["paused"] for step in expected) > 0 and expected[-1]["cache"]
    assert simulated.clock > 0
    assert simulated.stats.tokens_generated == real.stats.tokens_generated
    assert simulated.stats.decode_steps == real.stats.decode_steps
    assert simulated.stats.slot_steps_busy == real.stats.slot_steps_busy


def test_the_clock_charges_every_decode_step_at_the_cost_models_price():
    """One trajectory alone: its decode steps, priced one by one, plus one prefill."""
    engine = SimulatedEngine(PRICING, slots=4, max_new_tokens=100, lengths=lambda g, i: 30)
    group = Source().next_group()
    trajectory = Trajectory(group.prompt_ids, group.group_id, 0)
    engine.submit([trajectory])
    engine.poll()  # the prefill (its first token)
    prefill = engine.clock
    while engine.has_work:
        engine.poll()
    assert len(trajectory) == 30 and trajectory.finish_reason == "stop"
    prompt = len(group.prompt_ids)
    steps = [
        decode_step_seconds(PRICING.shape, PRICING.gpu, PRICING.efficiency, 1, prompt + i)
        for i in range(1, 30)
    ]
    assert engine.clock - prefill == pytest.approx(sum(steps))
    assert engine.stats.decode_steps == 29


def test_more_finishes_per_poll_take_fewer_polls_and_cost_about_the_same():
    def run(per_poll: int) -> tuple[int, float]:
        engine = SimulatedEngine(
            PRICING, slots=SLOTS, max_new_tokens=BUDGET,
            lengths=lambda g, i: 5 + (g * 7 + i * 13) % 50, finishes_per_poll=per_poll,
        )  # fmt: skip
        source, state, polls = Source(), RolloutState(), 0
        original = engine.poll

        def counted():
            nonlocal polls
            polls += 1
            return original()

        engine.poll = counted
        for version in range(1, 6):
            collect(engine, source, state, batch_groups=B, group_size=G, partial=True)
            engine.load_weights([], version=version)
        return polls, engine.clock

    exact_polls, exact_clock = run(1)
    fast_polls, fast_clock = run(4)
    assert fast_polls < exact_polls
    assert fast_clock == pytest.approx(exact_clock, rel=0.25)
