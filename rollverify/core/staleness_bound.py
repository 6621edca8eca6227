"""The staleness bound of asynchronous training: no token is trained by a policy more than `eta`
versions newer than the one that started its group (eta 0 is synchronous training).

A group started at version s has a deadline: it must be in a batch trained at version s + eta
or before. Each step trains B groups, so the groups in play are trainable in time exactly when,
for every deadline D, those due by D number at most (D - V + 1) x B (V: the version the trainer
trains next). Two rules keep that true, one on each side of the queue:
- **Admission**: with the engines at weights version v, a new group (deadline v + eta) may start
  only while the groups in play number fewer than (v + eta - V + 1) x B. AReaL's rule
  (areal/infra/staleness_manager.py `get_capacity`: groups started so far < (eta + v + 1) x B)
  is the same when batches are trained in the order their groups started; ours counts the
  groups in play instead, because a batch here takes groups as they complete, out of order.
- **Training**: the step at version V takes the B complete groups that started earliest, if
  what is left can still meet its deadlines; otherwise it waits for the engines (a long
  trajectory of an old group is waited for, never starved). In start order
  (`rollout.batch_order: start`, AReaL's FIFO) it takes the B groups in play that started
  earliest, complete or not, and waits until they are: a batch then holds groups as they were
  drawn, long and short alike, and only its tokens' staleness differs from a synchronous one.
A group's tokens are all sampled at or after its start version, so a trained token's staleness
(the version trained minus the version that sampled it) is at most V - s <= eta.
"""

from __future__ import annotations

from itertools import groupby


def may_start(in_play: int, engine_version: int, version: int, eta: int, batch_groups: int) -> bool:
    """Whether one more group may start on engines at weights `engine_version` while the
    trainer trains `version` next (`in_play`: groups started and not yet trained)."""
    return in_play < (engine_version + eta - version + 1) * batch_groups


def choose_batch(
    start_versions: dict[int, int],
    complete: set[int],
    version: int,
    eta: int,
    batch_groups: int,
    in_start_order: bool = False,
) -> list[int] | None:
    """The groups the step at `version` trains (ids, earliest start first), or None while it
    must wait. `start_versions`: every group in play -> the version it started at (in the
    order they started); `in_start_order`: the first B groups in play or nothing."""
    late = [g for g, start in start_versions.items() if start + eta < version]
    if late:
        raise ValueError(
            f"groups {late[:3]} are past their deadline at version {version}: more groups were "
            "in play than the admission rule allows"
        )
    if in_start_order:
        first = list(start_versions)[:batch_groups]  # dicts keep insertion: start order
        return first if len(first) == batch_groups and complete.issuperset(first) else None
    ready = sorted((start_versions[g], g) for g in complete)
    if len(ready) < batch_groups:
        return None
    chosen = [g for _, g in ready[:batch_groups]]
    left = sorted(start for g, start in start_versions.items() if g not in chosen)
    due = 0
    for start, same in groupby(left):
        due += len(list(same))
        if due > (start + eta - version) * batch_groups:  # batches after this one, by then
            return None
    return chosen
