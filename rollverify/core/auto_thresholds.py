"""Thresholds in the run's own units: `verify.ds: auto` and `verify.dt: auto`.

The rule: docs/rules.md, section 3, "Thresholds in drift units". At a check under policy
version v, before any cut:
  delta = mean token OPS of the cache's youngest stale policy tokens (version u < v, the
          largest such u), divided by their age v - u (the per-version drift; in a synchronous
          check those tokens are exactly one version old, and the age is 1)
  ds    = c * delta,   dt = (2 / 0.01) * c * delta   (c: verify.drift_versions; 2/0.01 the
          paper's dt/ds)
so that a segment may carry about c versions of this run's drift, at any model or step size.
OPS that are not finite are left out of the mean (they fail their own checks). A delta of 0
gives the smallest positive thresholds: a token that moved at all is more than c versions of
no drift. A cache without a stale policy token has nothing to judge: no threshold (inf).
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (none needed to run: the config's verify section imports AUTO from here,
    import torch  # and `rvctl --help` must not wait a second for torch)

AUTO = "auto"
PAPER_DT_PER_DS = 2.0 / 0.01  # the paper's dt over its ds
SMALLEST = sys.float_info.min * sys.float_info.epsilon  # the smallest positive float


def per_version_drift(
    ops: torch.Tensor, versions: torch.Tensor, policy: torch.Tensor, version: int
) -> float | None:
    """delta of the rule above: ops float [B, T] token OPS under version `version`, versions
    long [B, T], policy bool [B, T] the tokens the policy sampled. None without a stale one."""
    stale = policy & (versions < version)
    if not stale.any():
        return None
    youngest = int(versions[stale].max())
    of_youngest = ops[stale & (versions == youngest)].double()
    finite = of_youngest[of_youngest.isfinite()]
    drift = finite.mean().item() if finite.numel() else 0.0
    return drift / (version - youngest)


def thresholds(
    ds: float | str, dt: float | str, drift_versions: float, drift: float | None
) -> tuple[float, float]:
    """The (ds, dt) a check applies: each given number as it is, each `auto` from `drift`
    (per_version_drift's delta; None: nothing stale, no threshold)."""
    unit = math.inf if drift is None else max(drift_versions * drift, SMALLEST)
    return (
        unit if ds == AUTO else float(ds),
        PAPER_DT_PER_DS * unit if dt == AUTO else float(dt),
    )
