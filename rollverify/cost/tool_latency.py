"""Tool calls in simulated responses (`rvctl simulate --tool-calls`): where a response calls a
tool and how long the tool takes.

A multi-turn response leaves the engine at each call and comes back when the tool answers
(rollverify/rollout/tool_calls.py): its slot goes to another row meanwhile, and the response
ends later than its tokens alone would make it, which lengthens the long tail of a batch.
Modeled here, each named:
- **Calls**: a response of n generated tokens makes Poisson(n x per_1k / 1000) calls, at
  uniform positions among its tokens (ReTool's responses call a few times per thousand).
- **Latency**: lognormal(median_s, sigma) seconds a call (a sandboxed program: ~0.1 s to its
  timeout).
- **Output**: `output_tokens` tokens per call, which the response's context holds after it
  (prefilled when it comes back, never generated).
Drawn once per response from its key, so a paused and resumed response calls where it would
have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ToolCallModel:
    per_1k: float  # calls per 1,000 generated tokens, on average
    median_s: float = 1.0
    sigma: float = 1.0
    output_tokens: int = 64

    def check(self) -> None:
        if self.per_1k < 0 or self.median_s <= 0 or self.sigma < 0 or self.output_tokens < 0:
            raise ValueError(
                "--tool-calls: PER_1K,MEDIAN_S,SIGMA,OUTPUT_TOKENS must be >= 0 (the median > 0), "
                f"got {self.per_1k:g},{self.median_s:g},{self.sigma:g},{self.output_tokens}"
            )

    def sampler(self, seed: int) -> ToolCallSampler:
        return ToolCallSampler(self, seed)

    def describe(self) -> str:
        return (
            f"{self.per_1k:g} calls per 1K tokens, latency lognormal(median {self.median_s:g} s, "
            f"sigma {self.sigma:g}), {self.output_tokens} output tokens each"
        )


class ToolCallSampler:
    """`self(group_id, sample_index, length)`: the (position, seconds) of each call of that
    response of `length` generated tokens, by position (a call at position p follows its p-th
    token; 1 <= p < length)."""

    def __init__(self, model: ToolCallModel, seed: int) -> None:
        self.model, self.seed = model, seed
        self.output_tokens = model.output_tokens

    def __call__(self, group_id: int, sample_index: int, length: int) -> list[tuple[int, float]]:
        if length < 2 or not self.model.per_1k:
            return []
        rng = np.random.default_rng([self.seed, group_id, sample_index])
        count = min(int(rng.poisson(length * self.model.per_1k / 1000)), length - 1)
        positions = sorted(rng.choice(np.arange(1, length), size=count, replace=False).tolist())
        latencies = rng.lognormal(math.log(self.model.median_s), self.model.sigma, size=count)
        return list(zip(positions, latencies.tolist(), strict=True))
