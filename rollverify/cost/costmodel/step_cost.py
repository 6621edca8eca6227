"""The price of engine iterations, as a simulated engine asks for it: a GPU's (pricing.Pricing)
or a CPU's fitted one (cpu_profile.LinearStepCost)."""

from __future__ import annotations

from typing import Protocol

from rollverify.cost.trace import EngineStep


class StepCost(Protocol):
    """What a simulated engine needs priced (rollverify/rollout/engines/simulated.py)."""

    reads_padding: bool  # whether `padded` changes the price (else it may be passed as context)

    def decode_run(self, rows: float, context: float, padded: float, steps: int) -> float:
        """`steps` decode iterations of `rows` rows whose contexts sum to `context` at the first
        and grow by `rows` per iteration; `padded`: the positions attended at the first,
        padding included (it grows by `rows` too)."""

    def iteration(self, step: EngineStep) -> float:
        """One engine iteration (a prefill)."""
