"""Asynchronous rollout on the virtual clock (rollverify/rollout/async_rollout.py, the staleness
bound in rollverify/core/staleness_bound.py, `rvctl simulate --async`): the bound holds, eta 0
is synchronous training, weights land in flight, and overlap is priced."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from rollverify.config import load_config
from rollverify.core.staleness_bound import choose_batch, may_start
from rollverify.experiments.simulate import _Prompts, simulate_async, simulate_one
from rollverify.experiments.simulate_settings import Settings
from rollverify.rollout.async_rollout import AsyncState, next_batch
from rollverify.rollout.engines.simulated import SimulatedEngine
from rollverify.rollout.trajectory import Trajectory
from tests.cli import run_rvctl
from tests.test_simulated_engine import PRICING

PAPER = "experiments/qwen3-8b-dapo-math.yaml"


def test_admission_keeps_the_groups_in_play_trainable_by_their_deadlines():
    """(v + eta - V + 1) x B groups may be in play: eta + 1 batches' worth when the engines
    have the trainer's weights, one batch fewer while they wait for its newest."""
    assert may_start(in_play=7, engine_version=3, version=3, eta=0, batch_groups=8)
    assert not may_start(in_play=8, engine_version=3, version=3, eta=0, batch_groups=8)
    assert may_start(in_play=15, engine_version=3, version=3, eta=1, batch_groups=8)
    assert not may_start(in_play=16, engine_version=3, version=3, eta=1, batch_groups=8)
    assert not may_start(in_play=8, engine_version=2, version=3, eta=1, batch_groups=8)


def test_the_batch_takes_the_earliest_complete_groups_and_waits_when_deadlines_would_slip():
    starts = {10: 0, 11: 1, 12: 1, 13: 2, 14: 2}  # group -> start version
    # version 1, eta 1: group 10 (started at 0) is due now, 11 and 12 at version 2
    assert choose_batch(starts, {10, 12, 13, 14}, version=1, eta=1, batch_groups=2) == [10, 12]
    # group 10 unfinished: wait, though four others are complete
    assert choose_batch(starts, {11, 12, 13, 14}, version=1, eta=1, batch_groups=2) is None
    assert choose_batch(starts, {10}, version=1, eta=1, batch_groups=2) is None  # too few
    # version 2, eta 2, B 1: 10 is due now, 11 and 12 by version 3: with 13 alone complete
    # the step waits; with 10 complete too, taking it still leaves 11 and 12 for version 3
    assert choose_batch(starts, {13}, version=2, eta=2, batch_groups=1) is None
    assert choose_batch(starts, {10, 13}, version=2, eta=2, batch_groups=1) is None
    # eta 3 (deadlines 3, 4, 4, 5, 5): 10 now leaves 11, 12 for versions 3-4 and 13, 14 too
    # for 3-5: four groups, three batches, wait; eta 4: 10 now, the rest fits 3-6
    assert choose_batch(starts, {10, 13}, version=2, eta=3, batch_groups=1) is None
    assert choose_batch(starts, {10, 13}, version=2, eta=4, batch_groups=1) == [10]
    with pytest.raises(ValueError, match="past their deadline"):
        choose_batch(starts, set(starts), version=2, eta=1, batch_groups=2)


def test_in_start_order_the_batch_is_the_first_groups_started_complete_or_waited_for():
    starts = {10: 0, 11: 1, 12: 1, 13: 2, 14: 2}
    first = {"version": 1, "eta": 3, "batch_groups": 2, "in_start_order": True}
    assert choose_batch(starts, {10, 11, 13}, **first) == [10, 11]
    # 11 unfinished: wait for it, though 12, 13 and 14 are complete (completion order: 10, 12)
    assert choose_batch(starts, {10, 12, 13, 14}, **first) is None
    assert choose_batch(starts, {10, 12, 13, 14}, version=1, eta=3, batch_groups=2) == [10, 12]


@pytest.mark.parametrize("eta", [2, 4])
def test_in_start_order_batches_train_groups_as_drawn_and_the_bound_still_holds(eta):
    """Completion order trains the short groups first; start order trains every group in the
    order it started, so a batch's lengths are the draw's, and still no token lags past eta."""
    for order in (False, True):
        engine, state, source = heavy_tail_engine(), AsyncState(), _Prompts(tokens=8)
        trained, worst = [], 0
        for version in range(30):
            result = next_batch(
                engine, source, state, batch_groups=2, group_size=4, eta=eta, version=version,
                wait_for_weights=engine.wait_for_weights, in_start_order=order,
            )  # fmt: skip
            trained += [t.group_id for t in result.trajectories()][::4]
            worst = max(worst, *(version - t.oldest_version for t in result.trajectories()))
            engine.schedule_weights(version + 1, at=engine.clock + 1e-3)
        assert worst <= eta
        if order:
            assert trained == sorted(trained) == list(range(len(trained)))  # as started
        else:
            assert trained != sorted(trained)  # the short ones overtook


def heavy_tail_engine(seed: int = 0) -> SimulatedEngine:
    """Lengths 4-400 with a heavy tail: a few trajectories span many weight updates."""
    generator = torch.Generator().manual_seed(seed)
    table = (4 + 40 * torch.empty(10_000, 4).log_normal_(0, 1.2, generator=generator)).long()
    return SimulatedEngine(
        PRICING, slots=12, max_new_tokens=400,
        lengths=lambda g, i: int(table[g % 10_000, i].clamp(max=400)), admit_batch=1,
    )  # fmt: skip


@pytest.mark.parametrize("eta", [0, 1, 3])
def test_no_trained_token_lags_more_than_eta_and_no_group_is_starved(eta):
    engine, state, source = heavy_tail_engine(), AsyncState(), _Prompts(tokens=8)
    batch_groups, group_size, steps, worst = 2, 4, 40, 0
    for version in range(steps):
        result = next_batch(
            engine, source, state, batch_groups=batch_groups, group_size=group_size, eta=eta,
            version=version, wait_for_weights=engine.wait_for_weights,
        )  # fmt: skip
        for trajectory in result.trajectories():
            assert trajectory.finished
            worst = max(worst, version - trajectory.oldest_version)
        # nothing left behind that was due: every group started at version - eta or before
        assert all(start > version - eta for start in state.start_versions.values())
        engine.schedule_weights(version + 1, at=engine.clock + 1e-3)
    assert worst <= eta
    if eta > 0:
        assert worst == eta  # the bound is reached: async does run ahead
    assert len(state.start_versions) <= (eta + 1) * batch_groups


def test_tokens_of_one_trajectory_carry_the_versions_that_sampled_them_across_an_update():
    engine = SimulatedEngine(PRICING, slots=2, max_new_tokens=50, lengths=lambda g, i: 30)
    trajectory = Trajectory(torch.zeros(5, dtype=torch.long), 0, 0)
    engine.submit([trajectory])
    engine.poll()  # the prefill: its first token
    step_seconds = PRICING.decode_run(1, 6, 6, 1)
    engine.schedule_weights(1, at=engine.clock + 9.5 * step_seconds)  # during the 10th step
    done = []
    while engine.has_work:
        done += engine.poll()
    assert done == [trajectory] and len(trajectory) == 30
    versions = trajectory.versions.tolist()
    assert versions == sorted(versions) and versions[0] == 0 and versions[-1] == 1
    assert versions.count(0) == 11  # the prefill's token and steps 1-10, before the update


def test_weights_sent_before_the_last_landed_all_land_in_order():
    """A trainer that sends version 2 before version 1 reached the engine (it ran ahead of a
    slow engine): both land, each at its time, and tokens carry 0, then 1, then 2."""
    engine = SimulatedEngine(PRICING, slots=2, max_new_tokens=50, lengths=lambda g, i: 30)
    trajectory = Trajectory(torch.zeros(5, dtype=torch.long), 0, 0)
    engine.submit([trajectory])
    engine.poll()
    step_seconds = PRICING.decode_run(1, 6, 6, 1)
    engine.schedule_weights(1, at=engine.clock + 5.5 * step_seconds)
    engine.schedule_weights(2, at=engine.clock + 12.5 * step_seconds)
    while engine.has_work:
        engine.poll()
    versions = trajectory.versions.tolist()
    assert versions == sorted(versions) and set(versions) == {0, 1, 2}, versions
    assert engine.version == 2 and not engine.wait_for_weights()


@pytest.mark.parametrize("eta", [1, 2])
def test_the_bound_holds_and_every_version_lands_under_a_trainer_slower_than_the_engine(eta):
    """Each step trains for as long as 60 decode steps and its weights land only after it: the
    engine runs ahead up to the bound, then waits; no trained token lags more than eta, and the
    engine meets every version in turn."""
    engine, state, source = heavy_tail_engine(1), AsyncState(), _Prompts(tokens=8)
    train_seconds = 60 * PRICING.decode_run(12, 12 * 50, 12 * 50, 1)
    trainer_free, worst, seen, loaded = 0.0, 0, [], [0]
    poll = engine.poll

    def poll_and_watch():  # every version the engine runs under, in order
        finished = poll()
        if engine.version != loaded[-1]:
            loaded.append(engine.version)
        return finished

    engine.poll = poll_and_watch
    for version in range(30):
        result = next_batch(
            engine, source, state, batch_groups=2, group_size=4, eta=eta, version=version,
            wait_for_weights=engine.wait_for_weights,
        )  # fmt: skip
        worst = max([worst, *(version - t.oldest_version for t in result.trajectories())])
        seen.append(engine.version)
        trainer_free = max(engine.clock, trainer_free) + train_seconds
        engine.schedule_weights(version + 1, at=trainer_free)
    assert worst == eta
    assert seen == sorted(seen) and seen[-1] >= 30 - eta
    assert loaded == list(range(len(loaded))) and len(loaded) > 25, loaded  # none skipped
    while engine.wait_for_weights():
        pass
    assert engine.version == 30


def test_recomputing_the_kv_on_an_update_costs_a_prefill_of_every_running_row():
    clocks = {}
    for recompute in (True, False):
        engine = SimulatedEngine(PRICING, slots=4, max_new_tokens=80, lengths=lambda g, i: 60)
        engine.submit([Trajectory(torch.zeros(20, dtype=torch.long), g, 0) for g in range(4)])
        engine.poll()
        engine.schedule_weights(1, at=engine.clock, recompute_kv=recompute)
        engine.poll()
        clocks[recompute] = (engine.clock, engine.stats.tokens_recomputed_on_update)
    assert clocks[True][0] > clocks[False][0]
    assert clocks[True][1] > 4 * 20 and clocks[False][1] == 0


def paper(**overrides):
    return load_config(PAPER, overrides)


def test_eta_0_costs_what_synchronous_grpo_costs_and_overlap_pays_at_eta_1():
    settings = Settings(contexts=(8192,), steps=4, kv_cache=False)
    grpo = simulate_one(paper(), settings, "grpo", 8192, 0)
    eta0 = simulate_async(paper(), settings, 0, 8192, 0)
    eta1 = simulate_async(paper(), settings, 1, 8192, 0)
    assert math.isclose(eta0.gpu_days, grpo.gpu_days, rel_tol=1e-9)
    assert eta0.tokens_generated == grpo.tokens_generated and eta0.staleness_max == 0
    assert eta1.gpu_days < grpo.gpu_days and eta1.staleness_max == 1


def test_async_needs_a_layout_that_can_overlap(tmp_path, monkeypatch, capsys):
    colocated = tmp_path / "colocated.yaml"
    colocated.write_text("cost:\n  layout: colocated\n")
    done = run_rvctl(
        ["simulate", "-c", str(colocated), "--async", "1", "--steps", "1"], monkeypatch, capsys
    )
    assert done.returncode == 2 and "--async" in done.stderr and "Traceback" not in done.stderr
    done = run_rvctl(
        ["simulate", "-c", PAPER, "--async", "1", "--steps", "2", "--context", "2048",
         "--methods", "grpo", "--format", "json"],
        monkeypatch, capsys,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"async-eta1"' in done.stdout and '"staleness_max": 1' in done.stdout
    split = json.loads(done.stdout)[-1]["modeled_gpu_days"]
    done = run_rvctl(
        ["simulate", "-c", PAPER, "--async", "1", "--steps", "2", "--context", "2048",
         "--methods", "grpo", "--format", "json", "--set", "vllm.engines=8",
         "--set", "train.processes=2"],
        monkeypatch, capsys,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[-1]["modeled_gpu_days"] != split  # the split is a knob


def test_verification_in_async_mode_cuts_regenerates_and_switches_when_acceptance_collapses():
    """Before a batch trains, its trajectories with stale tokens are verified: what is cut is
    regenerated by the engines (the bound still holds), acceptance 1 cuts nothing but still
    pays the scoring, and a collapsed acceptance switches admission to synchronous."""
    base = Settings(contexts=(8192,), steps=12, kv_cache=False)
    plain = simulate_async(paper(), base, 2, 8192, 0)
    keeps_all = simulate_async(paper(), replace(base, acceptance=(1.0,)), 2, 8192, 0, verify=True)
    cuts = simulate_async(paper(), base, 2, 8192, 0, verify=True)
    collapses = simulate_async(paper(), replace(base, acceptance=(0.2,)), 2, 8192, 0, verify=True)
    assert keeps_all.tokens_regenerated == 0 and keeps_all.seconds["verify"] > 0
    assert keeps_all.trained == plain.trained  # (its scoring moves when weights land: not
    # the same tokens, the same batches)
    assert cuts.tokens_regenerated > 0 and cuts.staleness_max <= 2
    assert cuts.method == "async-verify-eta2" and cuts.switch_step is None
    assert collapses.switch_step is not None and collapses.staleness_max <= 2


def test_the_schedule_regenerates_what_verification_cuts_and_admits_synchronously_after_a_switch():
    engine, state, source = heavy_tail_engine(seed=2), AsyncState(), _Prompts(tokens=8)
    cut_total = 0

    def halve_stale(trajectories, version):
        nonlocal cut_total
        stale = [t for t in trajectories if t.oldest_version < version and len(t) > 1]
        for trajectory in stale:
            trajectory.truncate(len(trajectory) // 2)
        cut_total += len(stale)
        return stale

    for version in range(30):
        switched = version >= 15
        result = next_batch(
            engine, source, state, batch_groups=2, group_size=4, eta=2, version=version,
            wait_for_weights=engine.wait_for_weights, verify=halve_stale,
            admit_eta=0 if switched else None,
        )  # fmt: skip
        for trajectory in result.trajectories():
            assert trajectory.finished and version - trajectory.oldest_version <= 2
        if version >= 18:  # the groups started before the switch are gone
            assert len(state.start_versions) <= 2, version
        engine.schedule_weights(version + 1, at=engine.clock + 1e-3)
    assert cut_total > 0 and engine.stats.tokens_regenerated > 0
