"""How long two workers were busy at once, from the (start, end) intervals each was busy: the
ledger's overlap of asynchronous training (the engine beside the trainer)."""

from __future__ import annotations

Intervals = list[tuple[float, float]]


def clipped(intervals: Intervals, start: float, end: float) -> Intervals:
    """The parts of `intervals` inside [start, end]."""
    return [(max(a, start), min(b, end)) for a, b in intervals if min(b, end) > max(a, start)]


def merged(intervals: Intervals) -> Intervals:
    """Sorted and disjoint: overlapping or touching intervals joined."""
    out: Intervals = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def busy_seconds(intervals: Intervals) -> float:
    return sum(b - a for a, b in merged(intervals))


def both_busy_seconds(first: Intervals, second: Intervals) -> float:
    """Seconds inside an interval of `first` and one of `second` at once."""
    one, two, i, j, both = merged(first), merged(second), 0, 0, 0.0
    while i < len(one) and j < len(two):
        both += max(0.0, min(one[i][1], two[j][1]) - max(one[i][0], two[j][0]))
        if one[i][1] < two[j][1]:
            i += 1
        else:
            j += 1
    return both
