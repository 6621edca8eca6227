"""A CPU's engine iterations, whose cost is no roofline: a linear cost fitted from the machine's
own trace by non-negative least squares."""

from __future__ import annotations

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
    features = [
        lambda s: s.decode_rows > 0,
        lambda s: s.decode_rows,
        lambda s: s.decode_context,
        lambda s: s.decode_padded,
        lambda s: s.prefill_rows > 0,
        lambda s: s.prefill_rows,
        lambda s: s.prefill_tokens,
        lambda s: s.prefill_padded,
    ]
    import numpy as np
    from scipy.optimize import nnls

    matrix = np.array([[sum(f(s) for s in run) for f in features] for run in runs], dtype=float)
    scale = np.where(matrix.max(axis=0) > 0, matrix.max(axis=0), 1.0)  # columns of one size
    solution, _ = nnls(matrix / scale, np.array(seconds, dtype=float))
    return LinearStepCost(*(float(c) for c in solution / scale))
