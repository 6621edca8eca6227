"""Conditional switching: leave partial rollout for good once verification rejects too much.

The rule: docs/rules.md, section 4.
  acceptance rate of a cycle = sum(kept lengths) / sum(lengths before verification)
over the cached trajectories verified in that cycle; a cycle with nothing cached has no rate
and does not count. Once `window` rates are known and their mean is < `threshold`, the run
switches to on-policy rollout and never switches back.
"""

from __future__ import annotations

import math
from typing import Any


class AcceptanceMonitor:
    """Sliding-window acceptance rate and the one-way switch to on-policy rollout.

    `history` holds the rate of every counted cycle in order; `switch_cycle` is the index in
    `history` of the cycle that switched (None before), `switch_step` the training step the
    caller passed with it.
    """

    def __init__(self, window: int = 8, threshold: float = 0.5) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window={window!r} must be an integer >= 1")
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not 0 < threshold <= 1
        ):
            raise ValueError(f"threshold={threshold!r} must be in (0, 1]")
        self.window = window
        self.threshold = float(threshold)
        self.history: list[float] = []
        self.switch_cycle: int | None = None
        self.switch_step: int | None = None

    @property
    def switched(self) -> bool:
        return self.switch_cycle is not None

    @property
    def window_mean(self) -> float | None:
        """Mean rate of the last `window` counted cycles (fewer while filling); None if none."""
        recent = self.history[-self.window :]
        return sum(recent) / len(recent) if recent else None

    def update(self, kept_tokens: float, total_tokens: float, step: int | None = None) -> bool:
        """Count one verification cycle; True from the cycle that switches on.

        kept_tokens, total_tokens: sums over the trajectories verified in this cycle (ints or
        0-d tensors). total_tokens == 0 means nothing was cached: the cycle does not count.
        """
        kept, total = float(kept_tokens), float(total_tokens)
        if math.isnan(kept) or math.isnan(total) or not 0 <= kept <= total:
            raise ValueError(
                f"kept_tokens={kept_tokens!r}, total_tokens={total_tokens!r}: "
                "need 0 <= kept_tokens <= total_tokens"
            )
        if total == 0:
            return self.switched
        self.history.append(kept / total)
        full = len(self.history) >= self.window
        if not self.switched and full and self.window_mean < self.threshold:
            self.switch_cycle = len(self.history) - 1
            self.switch_step = step
        return self.switched

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able state: everything needed to continue exactly where it stopped."""
        return {
            "window": self.window,
            "threshold": self.threshold,
            "history": list(self.history),
            "switch_cycle": self.switch_cycle,
            "switch_step": self.switch_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        restored = AcceptanceMonitor(window=state["window"], threshold=state["threshold"])
        restored.history = [float(rate) for rate in state["history"]]
        restored.switch_cycle = state["switch_cycle"]
        restored.switch_step = state["switch_step"]
        self.__dict__.update(restored.__dict__)
