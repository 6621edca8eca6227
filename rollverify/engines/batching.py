"""How the in-process engine batches a prefill: rows of similar length together.

A prefill batch is left-padded to its longest row, so one batch of resumed trajectories (60-token
prompts beside 300-token trajectories) would compute rows x 300 positions. Sorted by length
and cut where a row is shorter than `keep` x the group's longest, no row pays more than
1 / keep of its own length, for a few more forward passes (each a few ms here)."""

from __future__ import annotations


def length_groups(lengths: list[int], keep: float = 0.75) -> list[list[int]]:
    """Indices of `lengths` in groups, longest first; within a group every length is at least
    `keep` x the group's first (longest)."""
    groups: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if groups and lengths[index] >= keep * lengths[groups[-1][0]]:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def padded_positions(lengths: list[int], keep: float = 0.75) -> int:
    """Positions the grouped prefill computes, padding included."""
    return sum(len(group) * lengths[group[0]] for group in length_groups(lengths, keep))
