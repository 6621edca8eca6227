"""Non-inferiority marks (rollverify/experiments/margin.py, `rvctl report --frontier --margin`):
the one-sided 95% bounds of the paired differences against -M decide "shown", "ruled out" or
"not decided" (with the pairs that would decide it), on differences whose answer is known."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy.stats import t

from rollverify.experiments.frontier import frontier_rows, markdown
from rollverify.experiments.margin import (
    NOT_DECIDED,
    RULED_OUT,
    SHOWN,
    non_inferiority,
    pairs_to_decide,
)
from rollverify.experiments.vs_baseline import parse_vs
from tests.test_frontier import GRPO, GRPO_FIGURES, run

MARGIN = 0.01
# mean -0.004, sd 0.005, 6 pairs: the one-sided 95% lower bound (t 2.015) is -0.0081, above
# -0.01: shown; the two-sided 95% interval's lower end (t 2.571) is -0.0092, also above, and at
# 4 pairs of the same spread the two disagree (see below)
WITHIN = [-0.004 + 0.005 * z for z in (-1.3, -0.7, -0.1, 0.4, 0.6, 1.1)]


def one_sided(diffs):
    mean, spread, n = statistics.fmean(diffs), statistics.stdev(diffs), len(diffs)
    half = t.ppf(0.95, n - 1) * spread / math.sqrt(n)
    return mean - half, mean + half


def test_a_difference_whose_lower_bound_clears_the_margin_is_shown():
    result = non_inferiority(WITHIN, MARGIN)
    lower, upper = one_sided(WITHIN)
    assert result["verdict"] == SHOWN and result["lower"] == pytest.approx(lower)
    assert result["upper"] == pytest.approx(upper) and result["pairs_to_decide"] is None


def test_the_bound_is_one_sided_not_the_two_sided_intervals_end():
    """Here the one-sided 95% bound is above -M and the two-sided 95% interval's end below: a
    test at 5% shows it; the interval's end would not."""
    diffs = [-0.004 + 0.0045 * z for z in (-1.16, -0.39, 0.39, 1.16)]  # mean -0.004, sd ~0.0045
    mean, spread, n = statistics.fmean(diffs), statistics.stdev(diffs), len(diffs)
    assert mean - t.ppf(0.975, n - 1) * spread / math.sqrt(n) < -MARGIN
    assert mean - t.ppf(0.95, n - 1) * spread / math.sqrt(n) > -MARGIN
    assert non_inferiority(diffs, MARGIN)["verdict"] == SHOWN


def test_a_difference_whose_upper_bound_is_below_the_margin_is_ruled_out():
    worse = [d - 0.02 for d in WITHIN]  # mean -0.024
    assert non_inferiority(worse, MARGIN)["verdict"] == RULED_OUT
    better = [d + 0.02 for d in WITHIN]  # a gain is within any margin
    assert non_inferiority(better, MARGIN)["verdict"] == SHOWN


def test_otherwise_not_decided_with_the_pairs_that_would_decide_it():
    wide = [-0.004 + 0.02 * z for z in (-1.3, -0.7, -0.1, 0.4, 0.6, 1.1)]
    result = non_inferiority(wide, MARGIN)
    assert result["verdict"] == NOT_DECIDED
    k = result["pairs_to_decide"]
    mean, spread = statistics.fmean(wide), statistics.stdev(wide)

    def clears(n):
        return mean - t.ppf(0.95, n - 1) * spread / math.sqrt(n) > -MARGIN

    assert clears(k) and not clears(k - 1), k
    assert pairs_to_decide(-MARGIN, 0.01, MARGIN) is None  # the mean on the margin: never
    assert non_inferiority(WITHIN[:2], MARGIN)["verdict"] is None  # n<3: nothing decided


def test_the_frontier_marks_each_point_and_says_so_in_its_table():
    within = [
        run("opsm", s, a + d, days) for (s, a, days), d in zip(GRPO_FIGURES, WITHIN, strict=False)
    ]
    worse = [run("partial", s, a - 0.05, days / 3) for s, a, days in GRPO_FIGURES]
    rows = frontier_rows([*GRPO, *within, *worse], parse_vs("grpo"), margin=MARGIN)
    found = {row["point"]: row for row in rows}
    assert found["partial"]["auc_within_margin"]["verdict"] == RULED_OUT
    cells = {row["point"]: row for row in markdown(rows)}
    assert cells["partial"]["within margin (auc)"] == "ruled out"
    expected = non_inferiority(WITHIN[:3], MARGIN)  # the first 3 differences: 3 seeds
    assert found["opsm"]["auc_within_margin"]["verdict"] == expected["verdict"]
    assert found["opsm"]["auc_within_margin"]["lower"] == pytest.approx(expected["lower"])
    unmarked = frontier_rows([*GRPO, *worse], parse_vs("grpo"))
    assert (
        "auc_within_margin" not in unmarked[0]
        and "within margin (auc)" not in markdown(unmarked)[0]
    )
