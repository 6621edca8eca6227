"""The staleness cap (rollout.max_staleness): no trajectory trains on tokens more than k policy
versions old.

staleness = current version - version of the trajectory's oldest token (filters.py's, per
trajectory; 0 without tokens). When a rollout resumes the cache, every group with a cached
trajectory of staleness > k (unfinished, or finished and waiting for its group) is dropped,
all G samples, and its prompt starts again as a fresh group: same group id, prompt and answer,
new samples. prime-rl's `max_off_policy_steps` drops stale in-flight groups the same way;
AReaL's `max_head_offpolicyness` bounds the same lag by holding back new rollouts instead.

A trajectory is generated over at most k + 1 rollouts (versions v .. v + k, one update per
rollout; train.updates_per_rollout = u: k // u + 1), counted whether or not it got a slot in
them (a rollout whose B groups completed in the cache generates nothing, yet ages the cache).
One that needs more is dropped every time, and a restart of its prompt needs as many again if
its samples are as long: such a prompt is starved. It never trains, and every k + 1 steps
throws away the tokens of its G samples (tests/test_staleness_cap.py shows it). Only a
restart that happens to sample shorter responses for all G lets it through.
"""

from __future__ import annotations

from rollverify.rollout.trajectory import Trajectory


def staleness_of(trajectory: Trajectory, version: int) -> int:
    """`version` minus the version of the trajectory's oldest token (0 without tokens)."""
    return version - int(trajectory.versions.min()) if len(trajectory) else 0


def split_stale(
    cached: list[Trajectory], version: int, max_staleness: int
) -> tuple[list[Trajectory], list[Trajectory]]:
    """(kept, dropped), each in cache order: dropped holds every cached member of each group
    with a trajectory more than `max_staleness` versions behind `version`."""
    stale = {t.group_id for t in cached if staleness_of(t, version) > max_staleness}
    kept = [t for t in cached if t.group_id not in stale]
    dropped = [t for t in cached if t.group_id in stale]
    return kept, dropped
