"""Counterfactual acceptance: at a check, what each threshold of a grid would have kept of the
same cache (docs/rules.md, section 3, "Thresholds before the run").

Verification is a pure function of the cache's token OPS, versions and thresholds, so what any
other ds (or dt) would have kept at this check is the same `verify` on the same numbers: exact
for that check, not a model. (It says nothing of later checks: there, the cache would hold what
those thresholds left, not what the run's left.)

A grid point is a number (ds, with two dt: the run's, and ds x the paper's dt/ds as `auto`
scales it) or `auto:c` (ds = c x the check's per-version drift; dt as `auto` scales it, and
the run's). Each gives the acceptance rate of the check: kept policy tokens over the policy
tokens checked, as switching counts it (core/switching.py). Asynchronous training checks
several times a step: a step's figure is of all its checks together (kept over checked).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rollverify.core.auto_thresholds import AUTO, PAPER_DT_PER_DS, thresholds

if TYPE_CHECKING:  # (torch where it computes: the config's verify section reads this module's
    import torch  # grid, and `rvctl --help` must not wait a second for torch)

GridPoint = float | str  # a ds, or "auto:c"
DEFAULT_GRID: tuple[GridPoint, ...] = (0.0025, 0.005, 0.01, 0.02, 0.04, 0.08)
DEFAULT_GRID += ("auto:1", "auto:2", "auto:4")


def parse_point(point: GridPoint) -> tuple[str, float | None]:
    """(its label, its ds) for a number; (its label, None) and c for `auto:c` is
    `drift_versions(point)`. ValueError naming the point where it is neither."""
    if isinstance(point, str) and point.startswith(f"{AUTO}:"):
        drift_versions(point)  # (checked)
        return f"auto_c{point.split(':', 1)[1]}", None
    if isinstance(point, bool) or not isinstance(point, (int, float)) or not point > 0:
        raise ValueError(f"{point!r}: a grid point is a ds > 0 or auto:C (C > 0)")
    return f"ds_{point:g}", float(point)


def drift_versions(point: str) -> float:
    try:
        c = float(point.split(":", 1)[1])
    except ValueError:
        c = math.nan
    if not c > 0:
        raise ValueError(f"{point!r}: auto:C needs C > 0 (a number of versions of drift)")
    return c


def grid_thresholds(
    points: Sequence[GridPoint], run_dt: float, drift: float | None
) -> dict[str, tuple[float, float]]:
    """label -> (ds, dt) of every grid point at a check: each point with the run's dt
    (`<label>`) and with dt scaled as auto scales it (`<label>_dt_scaled` for a number,
    `<label>_dt_run` for auto, whose own dt is the scaled one). `drift`: the check's
    per-version drift (None: nothing stale, an auto point has no threshold)."""
    out = {}
    for point in points:
        label, ds = parse_point(point)
        if ds is None:
            ds, scaled = thresholds(AUTO, AUTO, drift_versions(str(point)), drift)
            out[label], out[f"{label}_dt_run"] = (ds, scaled), (ds, run_dt)
        else:
            out[label], out[f"{label}_dt_scaled"] = (ds, run_dt), (ds, PAPER_DT_PER_DS * ds)
    return out


def grid_kept(
    ops: torch.Tensor,
    versions: torch.Tensor,
    mask: torch.Tensor,
    policy: torch.Tensor,
    points: Sequence[GridPoint],
    run_dt: float,
    drift: float | None,
) -> dict[str, int]:
    """label -> the policy tokens the grid point would have kept at this check, of the
    `policy.sum()` checked (the tensors as verify takes them): their ratio is the acceptance
    rate it would have given. Each point keeps exactly what `verify` with its thresholds keeps;
    what verify computes anew for each, the segments' means and the token stage's first
    failure, is computed here once for all of them (on a 4096 x 4096 cache, 18 calls of
    verify took 18.6x the run's own check's arithmetic, this pass 1.9x:
    benchmarks/grid_overhead.py)."""
    import torch

    from rollverify.core.argument_checks import (
        check_mask,
        check_positive_threshold,
        check_same_shape,
    )
    from rollverify.core.verify import right_padded_lengths, segments

    check_same_shape(ops=ops, versions=versions, mask=mask)
    check_mask(mask, ops.shape)
    check_mask(policy, ops.shape, "policy")
    lengths = right_padded_lengths(mask)
    stage_one = segments(ops, versions, mask, lengths, policy)
    stage_two = _WorstSoFar(ops, mask & policy)
    before = torch.nn.functional.pad(policy.long().cumsum(-1), (1, 0))  # policy tokens before
    out = {}
    for label, (ds, dt) in grid_thresholds(points, run_dt, drift).items():
        ds, dt = check_positive_threshold("ds", ds), check_positive_threshold("dt", dt)
        kept = lengths
        if not math.isinf(ds):
            kept = torch.minimum(kept, stage_one.first_failing(ds))
        if not math.isinf(dt):
            kept = torch.minimum(kept, stage_two.first_failing(dt))
        out[label] = int(before.gather(1, kept[:, None]).sum())
    return out


class _WorstSoFar:
    """The token stage for any dt: each row's largest OPS so far over its judged tokens (NaN
    counts as the worst, as it fails verify's `< dt`), a non-decreasing row, so the first token
    that fails `< dt` is a binary search."""

    def __init__(self, ops: torch.Tensor, judged: torch.Tensor) -> None:
        worst = ops.nan_to_num(nan=math.inf, posinf=math.inf, neginf=-math.inf)
        self.worst = worst.masked_fill(~judged, -math.inf).cummax(-1).values.contiguous()

    def first_failing(self, dt: float) -> torch.Tensor:
        """First column of each row whose token fails `< dt`, T where none does: long [B]."""
        import torch

        wanted = torch.full((self.worst.shape[0], 1), dt, dtype=self.worst.dtype)
        return torch.searchsorted(self.worst, wanted.to(self.worst.device)).squeeze(1)
