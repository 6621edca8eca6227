"""What a paired comparison of a few seeds can and cannot say: its interval, the smallest
difference it would detect, and the area under an evaluation curve (the staleness study's
primary figure, docs/results.md).

A table that reports "no difference" must also say how large a difference it could have
seen: `detectable_difference` is the smallest true mean difference that a two-sided paired t
test at 5% would detect with 80% power, given the spread of the differences observed
(noncentral t, exact). `seeds_needed` is how many pairs would bring it down to a target.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

ALPHA = 0.05
POWER = 0.80


def mean_ci95(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and the half-width of its 95% Student t interval (None when n < 2)."""
    if not values:
        return None, None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, t_critical_95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def t_critical_95(dof: int) -> float:
    """t(0.975, dof), the two-sided 95% Student t quantile."""
    from scipy.special import stdtrit  # lighter to import than scipy.stats

    return float(stdtrit(dof, 1 - ALPHA / 2))


def paired_power(difference: float, spread: float, pairs: int) -> float:
    """Power of the two-sided paired t test at ALPHA to detect a true mean `difference` when
    the differences have standard deviation `spread`, over `pairs` pairs."""
    from scipy.stats import nct

    if pairs < 2:
        return 0.0
    if spread <= 0:
        return 1.0 if difference else ALPHA
    dof = pairs - 1
    shift = abs(difference) * math.sqrt(pairs) / spread  # the noncentrality
    critical = t_critical_95(dof)
    lower = nct.cdf(-critical, dof, shift)  # the far tail: scipy returns NaN where it
    if math.isnan(lower):  # underflows (seen at 100+ pairs, shift ~10: < 1e-80 beside it)
        lower = 0.0
    return float(nct.sf(critical, dof, shift) + lower)


FEWEST_PAIRS = 3  # two pairs leave one degree of freedom (t = 12.7): no test of use


def detectable_difference(spread: float, pairs: int) -> float | None:
    """The smallest |mean difference| detected with POWER (None under FEWEST_PAIRS)."""
    from scipy.optimize import brentq

    if pairs < FEWEST_PAIRS:
        return None
    if spread <= 0:
        return 0.0
    high = spread
    while paired_power(high, spread, pairs) < POWER:
        high *= 2
    return float(brentq(lambda d: paired_power(d, spread, pairs) - POWER, 0.0, high, xtol=1e-6))


def paired_difference(
    diffs: Sequence[float],
) -> tuple[float | None, float | None, float | None]:
    """Paired differences' mean, the half-width of its 95% interval and the smallest difference
    detectable with POWER; under FEWEST_PAIRS only the mean (an interval of no use)."""
    mean, ci95 = mean_ci95(diffs)
    if len(diffs) < FEWEST_PAIRS:
        return mean, None, None
    return mean, ci95, detectable_difference(statistics.stdev(diffs), len(diffs))


def seeds_needed(spread: float, target: float, most: int = 1000) -> int | None:
    """The fewest pairs whose detectable difference is at most `target` (None past `most`)."""
    for pairs in range(FEWEST_PAIRS, most + 1):
        if detectable_difference(spread, pairs) <= target:
            return pairs
    return None


def curve_area(curve: Mapping[int, float]) -> float | None:
    """The normalised area under an evaluation curve, {step: accuracy}: the trapezoid rule
    over its steps divided by the steps it spans, so a flat curve at 0.6 has area 0.6. It
    weighs how soon a method learns as well as where it ends. None with fewer than 2 points."""
    steps = sorted(curve)
    if len(steps) < 2:
        return None
    area = sum((b - a) * (curve[a] + curve[b]) / 2 for a, b in zip(steps, steps[1:], strict=False))
    return area / (steps[-1] - steps[0])
