"""Refuse a step whose inputs are not finite, before they reach the loss and the weights.

A NaN log-prob or reward would turn the loss, the gradients and then every weight into NaN;
the run would go on producing garbage. The step stops instead, with what was bad and where.
"""

from __future__ import annotations

import torch


class StepRefused(RuntimeError):
    """A training step's inputs were not finite; the model was not updated."""

    exit_code = 1  # rvctl prints the message alone


def require_finite(what: str, values: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    """Raise StepRefused naming `what` and the first bad rows if any (masked) value is NaN/inf."""
    values = torch.as_tensor(values, dtype=torch.float64)
    bad = ~torch.isfinite(values)
    if mask is not None:
        bad &= mask
    if not bad.any():
        return
    rows = bad.reshape(bad.shape[0], -1).any(-1).nonzero().flatten().tolist() if bad.dim() else []
    kinds = sorted({"NaN" if torch.isnan(v) else "inf" for v in values[bad].flatten()[:100]})
    raise StepRefused(
        f"step refused: {int(bad.sum())} {what} are {'/'.join(kinds)} (rows {rows[:5]}); "
        "the model was not updated"
    )
