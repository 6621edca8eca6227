"""How the in-process engine batches rows: rows of similar length together.

A prefill batch is left-padded to its longest row, so one batch of resumed trajectories (60-token
prompts beside 300-token trajectories) would compute rows x 300 positions. Sorted by length
and cut where a row is shorter than `keep` x the group's longest, no row pays more than
1 / keep of its own length, for a few more forward passes. The decode
KV cache is banded the same way (`DECODE_KEEP`): no row attends to a much longer one's
padding."""

from __future__ import annotations

PREFILL_KEEP = 0.75  # a prefill group's rows are at least 3/4 of its longest
DECODE_KEEP = 0.5  # a decode band's rows are at least half its width (fewer, wider bands:
# each band is one more attention call per layer)


def length_groups(lengths: list[int], keep: float = PREFILL_KEEP) -> list[list[int]]:
    """Indices of `lengths` in groups, longest first; within a group every length is at least
    `keep` x the group's first (longest)."""
    groups: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if groups and lengths[index] >= keep * lengths[groups[-1][0]]:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def padded_positions(lengths: list[int], keep: float = PREFILL_KEEP) -> int:
    """Positions the grouped prefill computes, padding included."""
    return sum(len(group) * lengths[group[0]] for group in length_groups(lengths, keep))
