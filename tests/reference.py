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


def reference_kept(
    ops: list[float], versions: list[int], ds: float, dt: float, policy: list[bool] | None = None
) -> int:
    """`policy`: False on tool output (never judged; a cut falls on a policy token)."""
    policy = [True] * len(ops) if policy is None else policy
    kept = len(ops)
    start = 0
    while start < len(ops) and ds != math.inf:  # stage 1 (ds = inf disables it)
        end = start
        while end < len(ops) and versions[end] == versions[start]:
            end += 1
        judged = [o for o, p in zip(ops[start:end], policy[start:end], strict=True) if p]
        if judged and not sum(judged) / len(judged) < ds:
            kept = next(t for t in range(start, end) if policy[t])
            break
        start = end
    for t in range(kept if dt != math.inf else 0):  # stage 2 (dt = inf disables it)
        if policy[t] and not ops[t] < dt:
            return t
    return kept


def reference_switch_cycle(rates: list[float], window: int, threshold: float) -> int | None:
    for i in range(window - 1, len(rates)):
        if sum(rates[i - window + 1 : i + 1]) / window < threshold:
            return i
    return None
