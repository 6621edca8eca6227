"""A CPU's engine iterations, whose cost is no roofline: a linear cost fitted from the machine's
own trace by non-negative least squares."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from rollverify.cost.trace import EngineStep


@dataclass(frozen=True)
class LinearStepCost:
    """A machine's engine iterations fitted from its own trace (`fit_step_cost`), for a CPU,
    whose cost is no roofline. A decode pass costs overhead + per_row x rows + per_context x
    their context + per_padded x the positions attended with padding (the in-process engine
    pads each band of rows to its longest); a prefill pass prefill_overhead + per_prefill_row
    x rows + per_prefill_token x tokens + per_prefill_padded x the positions computed with
    padding (the in-process engine left-pads each group of a prefill to its longest). The
    in-process engine runs both in one poll, as two passes."""

    overhead: float
    per_row: float
    per_context: float
    per_padded: float
    prefill_overhead: float
    per_prefill_row: float
    per_prefill_token: float
    per_prefill_padded: float = 0.0

    @property
    def reads_padding(self) -> bool:
        return self.per_padded > 0

    def decode_run(self, rows: float, context: float, padded: float, steps: int) -> float:
        if rows <= 0 or steps <= 0:
            return 0.0
        per_step = self.overhead + self.per_row * rows + self.per_context * context
        per_step += self.per_padded * padded
        growth = (self.per_context + self.per_padded) * rows  # both grow by rows per step
        return steps * per_step + growth * steps * (steps - 1) / 2

    def iteration(self, step: EngineStep) -> float:
        decode = self.decode_run(step.decode_rows, step.decode_context, step.decode_padded, 1)
        if not step.prefill_rows:
            return decode
        prefill = self.prefill_overhead + self.per_prefill_row * step.prefill_rows
        prefill += self.per_prefill_token * step.prefill_tokens
        return decode + prefill + self.per_prefill_padded * step.prefill_padded


def fit_step_cost(steps: list[EngineStep], seconds: list[float]) -> LinearStepCost:
    """Least squares of measured iteration seconds on the trace's columns, no coefficient
    negative (scipy's non-negative least squares: a cost never falls with more work)."""
    return fit_step_cost_to_totals([[step] for step in steps], seconds)


def fit_step_cost_to_totals(runs: list[list[EngineStep]], seconds: list[float]) -> LinearStepCost:
    """The same fit where only the total seconds of each run of iterations were measured (an
    engine that times no iteration, as vLLM behind its RPC): a sum of linear costs is linear
    in the same coefficients."""
    features = step_features()
    matrix = [[sum(f(s) for s in run) for f in features] for run in runs]
    return LinearStepCost(*fit_terms(matrix, seconds)[0])


def step_features() -> list[Callable[[EngineStep], float]]:
    """The columns of an iteration that LinearStepCost's fields multiply, in their order."""
    return [
        lambda s: float(s.decode_rows > 0),
        lambda s: s.decode_rows,
        lambda s: s.decode_context,
        lambda s: s.decode_padded,
        lambda s: float(s.prefill_rows > 0),
        lambda s: s.prefill_rows,
        lambda s: s.prefill_tokens,
        lambda s: s.prefill_padded,
    ]


def fit_terms(
    matrix: list[list[float]], seconds: list[float]
) -> tuple[list[float], list[float | None], float]:
    """Non-negative least squares of `seconds` on the columns of `matrix` (scipy's NNLS: a cost
    never falls with more work). Returns (coefficients, their standard errors, the relative RMS
    residual). A coefficient's error is ordinary least squares' on the columns the fit kept
    (sigma^2 (A^T A)^-1, sigma^2 = RSS / (rows - kept)); None for a column it set to 0, and
    NaN where the rows do not outnumber the kept columns."""
    import numpy as np
    from scipy.optimize import nnls

    a = np.array(matrix, dtype=float).reshape(len(matrix), -1)
    y = np.array(seconds, dtype=float)
    peak = np.abs(a).max(axis=0) if len(a) else np.zeros(a.shape[1])
    scale = np.where(peak > 0, peak, 1.0)  # columns of one size
    solution, _ = nnls(a / scale, y)
    coefficients = solution / scale
    residuals = y - a @ coefficients
    rms = float(np.sqrt(np.mean(residuals**2)) / np.mean(np.abs(y))) if len(y) and y.any() else 0.0
    kept = np.flatnonzero(coefficients > 0)
    errors: list[float | None] = [None] * a.shape[1]
    dof = len(y) - len(kept)
    if len(kept):
        scaled = a[:, kept] / scale[kept]
        variance = float(residuals @ residuals) / dof if dof > 0 else math.nan
        covariance = variance * np.linalg.pinv(scaled.T @ scaled)
        for i, column in enumerate(kept):
            errors[column] = float(np.sqrt(max(covariance[i, i], 0.0)) / scale[column])
    return [float(c) for c in coefficients], errors, rms
