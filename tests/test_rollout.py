"""Rollout schedules on the real in-process engine: what is trained, cached, resumed, lost."""

import pytest
import torch

from rollverify.rollout.engines.hf_engine import HFEngine
from rollverify.rollout.schedules import PromptGroup, RolloutInterrupted, RolloutState, collect
from tests.tiny import EOS, PAD, prompts, random_model

B, G = 3, 4


class Source:
    """Groups 0, 1, 2, ... with deterministic random prompts."""

    def __init__(self):
        self.next_id = 0
        self.pool = prompts(200, seed=11)

    def next_group(self) -> PromptGroup:
        group = PromptGroup(self.next_id, self.pool[self.next_id], answer=str(self.next_id))
        self.next_id += 1
        return group


def _setup(slots=8, seed=0, eos_bias=-2.5, max_new_tokens=60):
    engine = HFEngine(
        random_model(eos_bias=eos_bias),
        slots=slots,
        max_new_tokens=max_new_tokens,
        eos_token_id=EOS,
        pad_token_id=PAD,
        seed=seed,
    )
    return engine, Source(), RolloutState()


def _collect(engine, source, state, partial, **kwargs):
    return collect(engine, source, state, batch_groups=B, group_size=G, partial=partial, **kwargs)


def test_synchronous_waits_for_every_trajectory():
    engine, source, state = _setup()
    result = _collect(engine, source, state, partial=False)
    assert [len(g) for g in result.groups] == [G] * B
    assert all(t.finished for t in result.trajectories())
    assert [g[0].group_id for g in result.groups] == [0, 1, 2] and source.next_id == B
    assert len(state.cache) == 0 and not engine.has_work and result.paused == 0
    assert result.answers == ["0", "1", "2"] and state.answers == {}


def test_partial_pauses_the_rest_and_loses_nothing_over_many_steps():
    engine, source, state = _setup()
    trained: list[tuple[int, int]] = []
    resumed_any, stale = False, 0
    for step in range(6):
        result = _collect(engine, source, state, partial=True)
        assert [len(g) for g in result.groups] == [G] * B
        assert all(t.finished for t in result.trajectories())
        trained += [t.key for t in result.trajectories()]
        resumed_any |= result.resumed > 0
        engine.load_weights(engine.model.state_dict().items(), version=step + 1)
        cached = [t.key for t in state.cache]
        # every trajectory of every group started so far: trained once or cached once
        started = {(g, i) for g in range(source.next_id) for i in range(G)}
        assert sorted(trained + cached) == sorted(started)
        assert set(state.answers) == {g for g, _ in cached}  # answers kept for groups in play
        stale += sum(int(t.versions.min()) < step for t in result.trajectories())
    assert resumed_any and result.paused > 0
    assert stale > 0, "partial rollout trains tokens sampled by older policies"


class RecordingEngine(HFEngine):
    """The real engine, remembering the order in which trajectories were submitted."""

    submitted: list

    def submit(self, trajectories):
        self.submitted = getattr(self, "submitted", []) + [t.key for t in trajectories]
        super().submit(trajectories)


def test_resumed_trajectories_go_first():
    engine = RecordingEngine(
        random_model(eos_bias=-2.5),
        slots=4,
        max_new_tokens=60,
        eos_token_id=EOS,
        pad_token_id=PAD,
        seed=0,
    )
    source, state = Source(), RolloutState()
    _collect(engine, source, state, partial=True)
    unfinished = [t.key for t in state.cache if not t.finished]
    assert unfinished
    engine.submitted = []
    _collect(engine, source, state, partial=True)
    assert engine.submitted[: len(unfinished)] == unfinished


def test_partial_that_never_pauses_equals_synchronous():
    """max_inflight_groups = B: no extra groups, nothing to pause: the two schedules agree."""
    runs = []
    for partial in (False, True):
        engine, source, state = _setup(seed=3)
        steps = []
        for step in range(3):
            result = _collect(engine, source, state, partial=partial, max_inflight_groups=B)
            steps.append(
                [
                    (t.key, t.token_ids.tolist(), t.behavior_logprobs.tolist())
                    for t in result.trajectories()
                ]
            )
            assert result.paused == 0 and len(state.cache) == 0
            engine.load_weights(engine.model.state_dict().items(), version=step + 1)
        runs.append(steps)
    assert runs[0] == runs[1]


def test_partial_keeps_slots_busier_on_a_long_tail():
    utilization = {}
    for partial in (False, True):
        engine, source, state = _setup(slots=12, eos_bias=-3.5, max_new_tokens=120)
        for _ in range(4):
            _collect(engine, source, state, partial=partial)
        utilization[partial] = engine.stats.utilization(engine.slots)
    assert utilization[True] > utilization[False]
    assert torch.tensor(list(utilization.values())).le(1).all()


def test_a_stop_mid_rollout_caches_everything_and_the_next_rollout_uses_it():
    """A stop request (SIGTERM) in the middle of a rollout: everything generated so far goes to
    the cache, finished trajectories of incomplete groups included; the next rollout trains on
    it with no trajectory lost, duplicated or regenerated from scratch."""
    for partial in (False, True):
        engine, source, state = _setup()
        stop = iter([False] * 15 + [True]).__next__  # asked on the 16th poll
        with pytest.raises(RolloutInterrupted):
            _collect(engine, source, state, partial=partial, should_stop=stop)
        assert not engine.has_work
        cached = {t.key: len(t) for t in state.cache}
        started = source.next_id
        assert len(cached) == started * G and sum(cached.values()) > 0
        assert set(state.answers) == set(range(started))
        result = _collect(engine, source, state, partial=partial)
        keys = [t.key for t in result.trajectories()] + [t.key for t in state.cache]
        assert len(keys) == len(set(keys)), "nothing duplicated"
        assert set(cached) <= set(keys), "nothing lost"
        kept = {t.key: len(t) for t in [*result.trajectories(), *state.cache]}
        assert all(kept[key] >= length for key, length in cached.items()), "tokens kept"


def _drop_even(group, answer) -> bool:
    """A stand-in for tied rewards: every group of an even id (answer = its id)."""
    assert {t.group_id for t in group} == {int(answer)} and len(group) == G
    return int(answer) % 2 == 0


@pytest.mark.parametrize("partial", [False, True])
def test_dynamic_sampling_replaces_dropped_groups_up_to_its_cap(partial):
    engine, source, state = _setup()
    result = _collect(engine, source, state, partial, drop_group=_drop_even, max_drops=10)
    assert [g[0].group_id for g in result.groups] == [1, 3, 5]  # each drop replaced
    assert result.dropped_groups == 3 and result.answers == ["1", "3", "5"]
    assert result.dropped_tokens > 0 and state.dropped == 0  # the next step drops afresh
    kept = {t.group_id for t in state.cache}
    assert not kept & {0, 2, 4} and not set(state.answers) & {0, 2, 4}  # dropped for good
    engine, source, state = _setup()  # at the cap, groups train whatever their rewards
    result = _collect(engine, source, state, partial, drop_group=_drop_even, max_drops=1)
    assert [g[0].group_id for g in result.groups] == [1, 2, 3] and result.dropped_groups == 1


def test_a_stopped_rollout_keeps_its_drops_toward_the_cap():
    engine, source, state = _setup()
    stop = iter([False] * 60 + [True]).__next__
    with pytest.raises(RolloutInterrupted):
        _collect(engine, source, state, True, drop_group=_drop_even, max_drops=2, should_stop=stop)
    assert state.dropped >= 1
    again = RolloutState()
    again.load_state_dict(state.state_dict())
    result = _collect(engine, source, again, True, drop_group=_drop_even, max_drops=2)
    # Groups 0 and 2 dropped in all, before and after the stop: then 4 trains.
    assert [g[0].group_id for g in result.groups] == [1, 3, 4]
    assert result.dropped_groups == 2 and again.dropped == 0
