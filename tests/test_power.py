"""What a paired comparison can detect (rollverify/experiments/power.py): checked against a
simulation of the test itself, and the curve area against hand computations."""

import numpy as np
import pytest
from scipy import stats

from rollverify.experiments.power import (
    curve_area,
    detectable_difference,
    paired_power,
    seeds_needed,
)


@pytest.mark.parametrize("pairs", [3, 5, 10])
def test_the_detectable_difference_is_detected_four_times_in_five(pairs):
    """Simulate the paired t test on differences with the detectable mean: it rejects
    ~80% of the time (a wrong power formula, e.g. a normal instead of a t, misses by more)."""
    spread = 0.04
    shift = detectable_difference(spread, pairs)
    rng = np.random.default_rng(0)
    draws = rng.normal(shift, spread, size=(40_000, pairs))
    p_values = stats.ttest_1samp(draws, 0.0, axis=1).pvalue
    assert (p_values < 0.05).mean() == pytest.approx(0.80, abs=0.01)


def test_power_grows_with_pairs_and_the_detectable_difference_shrinks():
    assert paired_power(0.03, 0.03, 5) < paired_power(0.03, 0.03, 10) < paired_power(0.03, 0.03, 20)
    assert detectable_difference(0.03, 5) > detectable_difference(0.03, 10) > 0.03 * 0.5
    assert detectable_difference(0.03, 2) is None  # one degree of freedom: no test of use
    # 5 seeds: about 1.68 spreads (the normal approximation would say (1.96 + 0.84) / sqrt 5)
    assert detectable_difference(1.0, 5) == pytest.approx(1.682, abs=0.002)


def test_seeds_needed_is_the_first_count_that_reaches_the_target():
    needed = seeds_needed(0.03, 0.03)
    assert detectable_difference(0.03, needed) <= 0.03 < detectable_difference(0.03, needed - 1)


def test_curve_area_is_the_normalised_trapezoid():
    assert curve_area({0: 0.6, 10: 0.6, 20: 0.6}) == pytest.approx(0.6)
    assert curve_area({0: 0.0, 10: 1.0}) == pytest.approx(0.5)
    # unequal spacing: 10 steps at a mean of 0.25, 30 at 0.75; the order given does not matter
    assert curve_area({40: 1.0, 0: 0.0, 10: 0.5}) == pytest.approx((10 * 0.25 + 30 * 0.75) / 40)
    assert curve_area({5: 0.3}) is None


def test_seeds_needed_for_a_noisy_method_is_counted_where_scipy_underflows():
    """A method that collapses on some seeds (paired spread 0.29 of AUC, the staleness study's
    partial-recomputed) needs ~750 pairs for 0.03: past 100 pairs scipy's lower tail of the
    noncentral t is NaN, which must count as the nothing it is, not stop the search."""
    needed = seeds_needed(0.288, 0.03)
    assert needed is not None and needed > 100
    assert detectable_difference(0.288, needed) <= 0.03 < detectable_difference(0.288, needed - 1)
    assert paired_power(0.03, 0.288, needed) == pytest.approx(0.80, abs=0.005)
