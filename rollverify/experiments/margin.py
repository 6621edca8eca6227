"""Is a method within a margin of its baseline? Non-inferiority from paired differences
(`rvctl report --frontier --margin M`, `--vs ... --margin M`).

For the paired differences d_i (the method minus its baseline twin, seed by seed; AUC or final
accuracy), with mean d, spread s and n pairs, the one-sided 95% bounds are
    lower = d - t(0.95, n-1) s / sqrt(n),   upper = d + t(0.95, n-1) s / sqrt(n)
(each a one-sided test at 5%: a two-sided 95% interval's ends are 90% one-sided bounds only at
its own level, and would call a point decided less often than the test allows). Then:
    shown        lower > -M: within M of the baseline, at 5% (the method is not worse by M)
    ruled out    upper < -M: worse than the baseline by more than M, at 5%
    not decided  otherwise, with the pairs that would decide it were the mean and spread as
                 observed (the smallest n from FEWEST_PAIRS on at which one bound clears -M)
Under FEWEST_PAIRS pairs nothing is decided (n<3), as no interval is drawn.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from rollverify.experiments.power import FEWEST_PAIRS

SHOWN, RULED_OUT, NOT_DECIDED = "shown", "ruled out", "not decided"
MOST_PAIRS = 10_000  # past this, "not decided" says no feasible number


def t_one_sided_95(dof: int) -> float:
    """t(0.95, dof): the one-sided 95% Student t quantile."""
    from scipy.special import stdtrit

    return float(stdtrit(dof, 0.95))


def non_inferiority(diffs: Sequence[float], margin: float) -> dict:
    """{verdict, lower, upper, pairs, pairs_to_decide} of paired differences against -margin
    (see the module); verdict None under FEWEST_PAIRS pairs."""
    pairs = len(diffs)
    if pairs < FEWEST_PAIRS:
        return {"verdict": None, "lower": None, "upper": None, "pairs": pairs,
                "pairs_to_decide": None}  # fmt: skip
    mean, spread = statistics.fmean(diffs), statistics.stdev(diffs)
    half = t_one_sided_95(pairs - 1) * spread / math.sqrt(pairs)
    lower, upper = mean - half, mean + half
    if lower > -margin:
        verdict = SHOWN
    elif upper < -margin:
        verdict = RULED_OUT
    else:
        verdict = NOT_DECIDED
    to_decide = pairs_to_decide(mean, spread, margin) if verdict == NOT_DECIDED else None
    return {"verdict": verdict, "lower": lower, "upper": upper, "pairs": pairs,
            "pairs_to_decide": to_decide}  # fmt: skip


def pairs_to_decide(mean: float, spread: float, margin: float) -> int | None:
    """The fewest pairs at which a mean `mean` with spread `spread` would be decided against
    -margin (shown above it, ruled out below it); None where it never would (the mean on the
    margin itself) or past MOST_PAIRS."""
    gap = abs(mean + margin)
    if gap == 0:
        return None

    def decides(pairs: int) -> bool:  # the bound's half-width falls as pairs grow
        return t_one_sided_95(pairs - 1) * spread / math.sqrt(pairs) < gap

    if not decides(MOST_PAIRS):
        return None
    low, high = FEWEST_PAIRS, MOST_PAIRS  # the answer is in [low, high]
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if decides(middle) else (middle + 1, high)
    return low


def margin_cell(result: dict) -> str:
    """A table cell: 'shown', 'ruled out', 'not decided (k pairs)', 'n<3'."""
    verdict = result["verdict"]
    if verdict is None:
        return f"n<{FEWEST_PAIRS}" if result["pairs"] else "-"
    if verdict == NOT_DECIDED:
        k = result["pairs_to_decide"]
        return f"{NOT_DECIDED} ({k} pairs)" if k else f"{NOT_DECIDED} (no n would)"
    return verdict
