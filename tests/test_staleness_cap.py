"""The staleness cap (rollout.max_staleness, rollverify/rollout/staleness_cap.py): a group with a
cached trajectory more than k versions old is dropped when the cache resumes, and its prompt starts
again. On the simulated engine, whose lengths are fixed per (group, sample): what is kept,
dropped, restarted and counted, and what becomes of a long trajectory."""

from __future__ import annotations

import pytest
import torch

from rollverify.cost.costmodel import GPUS, Layout, ModelShape, Pricing
from rollverify.rollout.engines.simulated import SimulatedEngine
from rollverify.rollout.schedules import RolloutInterrupted, RolloutState, collect
from rollverify.rollout.trajectory import Trajectory
from rollverify.tracking.run_records import run_record
from rollverify.training.run import train
from tests.runs import history, tiny
from tests.test_rollout import Source

PRICING = Pricing(ModelShape.of("Qwen/Qwen3-8B-Base"), GPUS["h100"], Layout("colocated", 1))
SHORT, LONG = 3, 9  # tokens of every sample, and of sample (0, 0) in the long-tail runs


# -- a long trajectory under the cap --------------------------------------------------------


def _partial_run(max_staleness: int | None, long_until: int | None = None) -> dict:
    """30 steps of partial rollout (B = G = 2, 8 slots), one policy update per step; sample
    (0, 0) is LONG (SHORT from version `long_until` on, if given: a restart there draws a
    short one), every other SHORT. Returns the step (0, 0) trains at, its staleness then, and
    the steps that restarted it."""

    def lengths(group: int, index: int) -> int:
        started_late = long_until is not None and engine.version >= long_until
        return LONG if (group, index) == (0, 0) and not started_late else SHORT

    engine = SimulatedEngine(PRICING, slots=8, max_new_tokens=64, lengths=lengths)
    source, state = Source(), RolloutState()
    run = {"trained": None, "staleness": None, "restarts": []}
    for step in range(1, 31):
        before = {t.key: t for t in state.cache}.get((0, 0))
        result = collect(
            engine, source, state, batch_groups=2, group_size=2, partial=True,
            max_staleness=max_staleness,
        )  # fmt: skip
        trained = [t for t in result.trajectories() if t.key == (0, 0)]
        if trained:
            run["trained"] = step
            run["staleness"] = engine.version - int(trained[0].versions.min())
            return run
        after = {t.key: t for t in state.cache}[(0, 0)]
        if before is not None and after is not before:  # a new sample in its place
            assert state.answers[0] == "0" and bool((after.versions == engine.version).all())
            run["restarts"].append(step)
        engine.load_weights([], version=step)
    return run


def test_a_trajectory_needing_more_rollouts_than_the_cap_allows_is_starved():
    """(0, 0) needs 4 rollouts (versions 0-3; it gets no token in the one at version 2, whose
    B groups had completed in the cache). A cap of 3 trains it as no cap does; under a cap
    of 2 its group is dropped every 3 steps and, the restart as long, it never trains."""
    uncapped = _partial_run(None)
    assert uncapped == {"trained": 4, "staleness": 3, "restarts": []}
    assert _partial_run(3) == uncapped  # at the cap: kept
    starved = _partial_run(2)
    assert starved["trained"] is None
    assert starved["restarts"] == [4, 7, 10, 13, 16, 19, 22, 25, 28]  # every 3 steps, for good
    # If the restart draws a shorter sample (a sampler may), it trains at once, fresh.
    assert _partial_run(2, long_until=3) == {"trained": 4, "staleness": 0, "restarts": []}


# -- what is kept, dropped, restarted and counted ------------------------------------------

VERSION = 5  # the engine's, when the cache below resumes
CACHE = {  # (group, sample): (versions of its tokens, finished?); groups 0-2 of G = 2
    (0, 0): ([3, 4], False),  # staleness 2
    (0, 1): ([4], True),
    (1, 0): ([2, 4], False),  # staleness 3
    (1, 1): ([4, 4, 4], True),
    (2, 0): ([], False),  # no token: staleness 0
    (2, 1): ([1, 1, 1], True),  # finished, waiting for its group: staleness 4
}


def _stale_cache():
    """An engine at VERSION and the cache above: (engine, source, state, prompts by group)."""
    engine = SimulatedEngine(
        PRICING, slots=8, max_new_tokens=64, lengths=lambda g, i: SHORT, version=VERSION
    )
    source, state = Source(), RolloutState()
    groups = [source.next_group() for _ in range(3)]
    for group in groups:
        state.answers[group.group_id] = group.answer
    for (group, index), (versions, finished) in CACHE.items():
        n = len(versions)
        state.cache.add(
            Trajectory(
                groups[group].prompt_ids, group, index, torch.zeros(n, dtype=torch.long),
                torch.zeros(n), torch.tensor(versions, dtype=torch.long),
                "stop" if finished else None,
            )
        )  # fmt: skip
    return engine, source, state, {g.group_id: g.prompt_ids for g in groups}


def _resume(engine, source, state, max_staleness: int | None, **kwargs):
    """One partial rollout of B = 3 groups, no group beyond those (max_inflight_groups 3)."""
    return collect(
        engine, source, state, batch_groups=3, group_size=2, partial=True,
        max_inflight_groups=3, max_staleness=max_staleness, **kwargs,
    )  # fmt: skip


def _versions(result) -> dict:
    return {t.key: t.versions.tolist() for t in result.trajectories()}


RESTARTED = {  # trained with a cap of 2: group 0 resumed, groups 1 and 2 new samples
    (0, 0): [3, 4, 5], (0, 1): [4],
    (1, 0): [5, 5, 5], (1, 1): [5, 5, 5], (2, 0): [5, 5, 5], (2, 1): [5, 5, 5],
}  # fmt: skip


@pytest.mark.parametrize("max_staleness", [None, 4])
def test_without_a_cap_or_within_it_every_cached_trajectory_resumes(max_staleness):
    engine, source, state, _ = _stale_cache()
    result = _resume(engine, source, state, max_staleness)
    assert (result.dropped_stale, result.dropped_stale_tokens, result.resumed) == (0, 0, 3)
    assert _versions(result) == {
        (0, 0): [3, 4, 5], (0, 1): [4], (1, 0): [2, 4, 5],
        (1, 1): [4, 4, 4], (2, 0): [5, 5, 5], (2, 1): [1, 1, 1],
    }  # fmt: skip


def test_a_group_beyond_the_cap_is_dropped_whole_and_its_prompt_starts_again():
    """Cap 2: group 0 (staleness 2) resumes; groups 1 and 2 (3, and 4 by a finished sample)
    are dropped, all their samples, and start again: same group, prompt and answer."""
    engine, source, state, prompts = _stale_cache()
    result = _resume(engine, source, state, 2)
    assert [g[0].group_id for g in result.groups] == [0, 1, 2] and source.next_id == 3
    assert result.answers == ["0", "1", "2"] and state.answers == {}
    assert _versions(result) == RESTARTED
    assert all(torch.equal(t.prompt_ids, prompts[t.group_id]) for t in result.trajectories())
    assert result.resumed == 1  # (0, 0); the new samples are not resumed ones
    # Counted: the 4 cached trajectories of groups 1 and 2, and their 2 + 3 + 0 + 3 tokens.
    assert (result.dropped_stale, result.dropped_stale_tokens) == (4, 8)
    assert (state.dropped_stale, state.dropped_stale_tokens) == (0, 0)  # the next step afresh


def test_a_stopped_rollout_keeps_its_stale_drops_through_a_checkpoint():
    engine, source, state, _ = _stale_cache()
    with pytest.raises(RolloutInterrupted):
        _resume(engine, source, state, 2, should_stop=lambda: True)
    assert (state.dropped_stale, state.dropped_stale_tokens) == (4, 8)
    cached = {t.key: t.versions.tolist() for t in state.cache}
    assert cached == {(0, 0): [3, 4], (0, 1): [4]} | {k: [] for k in RESTARTED if k[0] > 0}
    saved = state.state_dict()
    again = RolloutState()
    again.load_state_dict(saved)
    assert {t.key: t.versions.tolist() for t in again.cache} == cached
    assert again.answers == state.answers == {0: "0", 1: "1", 2: "2"}
    result = _resume(engine, source, again, 2)  # the restarted samples are fresh: kept
    assert _versions(result) == RESTARTED
    assert (result.dropped_stale, result.dropped_stale_tokens) == (4, 8)  # counted once
    old = {k: v for k, v in saved.items() if not k.startswith("dropped_stale")}
    again.load_state_dict(old)  # a checkpoint from before the cap
    assert (again.dropped_stale, again.dropped_stale_tokens) == (0, 0)


# -- end to end -----------------------------------------------------------------------------


@pytest.mark.slow  # a 3-step run, ~5 s
def test_a_run_under_a_low_cap_logs_its_stale_drops_and_their_tokens(tmp_path):
    """Cap 0: every paused trajectory's group is dropped at the next rollout. partial has no
    filter, verification or dynamic sampling: its discarded tokens are the stale ones."""
    summary = train(tiny(tmp_path, "partial", **{"rollout.max_staleness": 0}))
    metrics = history(summary)
    dropped, discarded = metrics["trajectories_dropped_stale"], metrics["tokens_discarded"]
    assert dropped[1] == 0 and sum(dropped.values()) > 0
    assert all((discarded[step] > 0) == (n > 0) for step, n in dropped.items())
    assert metrics["tokens_discarded_total"][3] == sum(discarded.values())
    # the report's record reads them too (rvctl report --table composition counts what starves)
    record = run_record(summary.tracking_uri, summary.run_id)
    assert record.history["trajectories_dropped_stale"] == dropped


@pytest.mark.slow  # two 3-step runs, ~10 s
def test_a_run_stopped_in_the_rollout_after_a_stale_drop_still_counts_it(tmp_path, monkeypatch):
    """A stop in step 2's rollout, after the cap dropped step 1's paused groups: the
    checkpoint keeps the step's drops, and the resumed run logs them as the uninterrupted
    run does (its cache no longer holds them to drop again)."""
    from rollverify.training.loop import TrainingLoop
    from rollverify.training.run import resume
    from rollverify.training.stopping import RunInterrupted

    settings = {"rollout.max_staleness": 0, "train.checkpoint_every": 0}
    reference = history(train(tiny(tmp_path / "reference", "partial", **settings)))
    assert reference["trajectories_dropped_stale"][2] > 0
    collect = TrainingLoop._collect

    def stop_in_step_2(self):
        self.stop.requested |= self.version == 1  # seen after the cache was taken and capped
        return collect(self)

    monkeypatch.setattr(TrainingLoop, "_collect", stop_in_step_2)
    with pytest.raises(RunInterrupted) as stopped:
        train(tiny(tmp_path / "stopped", "partial", **settings))
    assert stopped.value.step == 1
    monkeypatch.undo()
    resumed = history(resume(stopped.value.run_dir))
    for name in ("trajectories_dropped_stale", "tokens_discarded"):
        assert resumed[name][2] == reference[name][2], name
