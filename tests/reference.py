"""A literal, loop-by-loop reading of the spec, to check the vectorized code against.

Deliberately naive: one trajectory at a time, one token at a time, in plain Python floats.
"""

from __future__ import annotations

import math


def reference_token_ops(current: list[float], behavior: list[float], metric: str) -> list[float]:
    out = []
    for c, b in zip(current, behavior, strict=True):
        log_ratio = c - b
        ratio = math.exp(log_ratio)
        out.append(
            {
                "abs_ratio": abs(ratio - 1),
                "abs_log_ratio": abs(log_ratio),
                "k3": ratio - 1 - log_ratio,
            }[metric]
        )
    return out


def reference_kept(ops: list[float], versions: list[int], ds: float, dt: float) -> int:
    kept = len(ops)
    start = 0
    while start < len(ops) and ds != math.inf:  # stage 1 (ds = inf disables it)
        end = start
        while end < len(ops) and versions[end] == versions[start]:
            end += 1
        mean = sum(ops[start:end]) / (end - start)
        if not mean < ds:
            kept = start
            break
        start = end
    for t in range(kept if dt != math.inf else 0):  # stage 2 (dt = inf disables it)
        if not ops[t] < dt:
            return t
    return kept


def reference_switch_cycle(rates: list[float], window: int, threshold: float) -> int | None:
    for i in range(window - 1, len(rates)):
        if sum(rates[i - window + 1 : i + 1]) / window < threshold:
            return i
    return None
