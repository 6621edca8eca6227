"""Acceptance monitor: the spec's switching vectors, the window, state round-trip, errors; and
a real run that switches."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollverify.core.switching import AcceptanceMonitor
from rollverify.training.run import resume, train
from tests.reference import reference_switch_cycle
from tests.runs import cached, history, tiny, unfinished


def _feed(monitor, rates, scale=1000):
    """Feed rates as (kept, total) token counts; return the cycle at which update turned True."""
    first = None
    for cycle, rate in enumerate(rates):
        switched = monitor.update(kept_tokens=round(rate * scale), total_tokens=scale, step=cycle)
        if switched and first is None:
            first = cycle
    return first


def test_switch_cycle_matches_every_vector(vectors):
    for case in vectors["switch"]:
        monitor = AcceptanceMonitor(window=case["window"], threshold=case["threshold"])
        assert _feed(monitor, case["rates"], scale=10_000) == case["switch_after_cycle"], case
        assert monitor.switch_cycle == case["switch_after_cycle"]


def test_switch_is_one_way_and_remembers_its_step():
    monitor = AcceptanceMonitor(window=2, threshold=0.5)
    assert not monitor.update(9, 10, step=3)
    assert monitor.update(0, 10, step=4)  # mean 0.45 < 0.5
    assert monitor.update(10, 10, step=5)  # stays switched even with a perfect cycle
    assert (monitor.switch_cycle, monitor.switch_step) == (1, 4)
    assert monitor.history == [0.9, 0.0, 1.0]


def test_cycles_with_nothing_cached_do_not_count():
    monitor = AcceptanceMonitor(window=2, threshold=0.5)
    for _ in range(5):
        assert not monitor.update(kept_tokens=0, total_tokens=0)
    assert monitor.history == [] and monitor.window_mean is None
    monitor.update(1, 10)
    assert not monitor.switched  # the window is not full yet: one counted cycle
    assert monitor.update(2, 10)


@given(st.lists(st.floats(0, 1), max_size=40), st.integers(1, 10), st.floats(0.01, 1))
def test_switch_cycle_equals_the_literal_definition(rates, window, threshold):
    monitor = AcceptanceMonitor(window=window, threshold=threshold)
    for rate in rates:
        monitor.update(rate, 1.0)
    assert monitor.switch_cycle == reference_switch_cycle(rates, window, threshold)


def test_state_round_trips_through_json_mid_run():
    rates = [0.9, 0.7, 0.6, 0.4, 0.3, 0.2, 0.1]
    straight = AcceptanceMonitor(window=3, threshold=0.5)
    _feed(straight, rates)
    resumed = AcceptanceMonitor(window=3, threshold=0.5)
    _feed(resumed, rates[:3])
    state = json.loads(json.dumps(resumed.state_dict()))
    restored = AcceptanceMonitor()
    restored.load_state_dict(state)
    for cycle, rate in enumerate(rates[3:], start=3):
        restored.update(round(rate * 1000), 1000, step=cycle)
    assert restored.state_dict() == straight.state_dict()
    assert restored.switch_step == straight.switch_step == 4


def test_defaults_are_the_spec_defaults_and_a_fresh_monitor_has_not_switched():
    monitor = AcceptanceMonitor()
    assert (monitor.window, monitor.threshold) == (8, 0.5)
    assert monitor.switch_cycle is None and monitor.switch_step is None
    assert monitor.state_dict()["switch_step"] is None


def test_a_switched_monitor_round_trips_with_its_own_settings():
    monitor = AcceptanceMonitor(window=2, threshold=0.7)
    _feed(monitor, [0.9, 0.4, 0.3])
    assert monitor.switched
    restored = AcceptanceMonitor()
    restored.load_state_dict(json.loads(json.dumps(monitor.state_dict())))
    assert (restored.window, restored.threshold) == (2, 0.7)
    assert (restored.switch_cycle, restored.switch_step) == (1, 1)
    assert restored.state_dict() == monitor.state_dict()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": "0.5"}, r"threshold='0.5' must be in \(0, 1\]"),
        ({"threshold": True}, r"threshold=True must be in \(0, 1\]"),
        ({"window": 0}, "window=0 must be an integer >= 1"),
        ({"window": 2.5}, "window=2.5"),
        ({"threshold": 0}, r"threshold=0 must be in \(0, 1\]"),
        ({"threshold": 1.5}, "threshold=1.5"),
    ],
)
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AcceptanceMonitor(**kwargs)


def test_bad_counts_are_named():
    with pytest.raises(
        ValueError, match="kept_tokens=11, total_tokens=10: need 0 <= kept_tokens <= total_tokens"
    ):
        AcceptanceMonitor().update(11, 10)
    with pytest.raises(ValueError, match="kept_tokens=-1"):
        AcceptanceMonitor().update(-1, 10)


# -- end to end: a run whose acceptance collapses ------------------------------------------------


@pytest.mark.slow
def test_a_collapsing_acceptance_rate_switches_the_run_to_on_policy_for_good(tmp_path):
    """Window 2, a strict ds and a policy that moves fast: acceptance falls, the window fills,
    the run switches. From then on nothing is paused, the cached trajectories are completed in
    the next rollout, training becomes on-policy once the cache is drained, and a resumed run
    stays switched (spec: "Acceptance rate and conditional switching")."""
    steps = 6
    config = tiny(
        tmp_path,
        "rollverify",
        **{
            "train.steps": steps,
            "train.learning_rate": 0.05,
            "verify.window": 2,
            "verify.ds": 1e-3,
            "train.checkpoint_every": 1,
            "train.keep_checkpoints": steps + 1,
        },
    )
    summary = train(config)
    metrics = history(summary)
    switch = summary.switch_step
    assert switch is not None and switch < steps - 2, "the switch must leave steps to check"
    cycles = [s for s in metrics["acceptance_rate"] if s <= switch]
    assert len(cycles) >= config.verify.window, "the window filled before the switch"
    assert metrics["acceptance_window_mean"][switch] < config.verify.switch_threshold
    assert metrics["switched"] == {s: float(s >= switch) for s in range(1, steps + 1)}
    assert sum(metrics["paused"][s] for s in range(1, switch + 1)) > 0, "partial before"
    assert all(metrics["paused"][s] == 0 for s in range(switch + 1, steps + 1)), "never again"

    run_dir = summary.run_dir
    waiting = len(unfinished(cached(run_dir, switch)))
    assert waiting > 0, "trajectories were cached when the run switched"
    assert metrics["resumed"][switch + 1] == waiting, "completed in the next rollout"
    assert all(not unfinished(cached(run_dir, s)) for s in range(switch + 1, steps + 1))
    drained = min(s for s in range(switch + 1, steps + 1) if metrics["cache_size"][s] == 0)
    assert drained < steps
    assert all(metrics["staleness_mean"][s] == 0 for s in range(drained + 1, steps + 1))
    assert all(metrics["ops_mean"][s] < 1e-4 for s in range(drained + 1, steps + 1))

    resumed = resume(run_dir, {"train.steps": steps + 2})
    assert (resumed.run_id, resumed.switch_step) == (summary.run_id, switch)
    after = history(resumed)
    for step in (steps + 1, steps + 2):
        assert after["switched"][step] == 1.0 and after["paused"][step] == 0
