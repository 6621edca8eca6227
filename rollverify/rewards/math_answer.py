"""Rule-based reward for real math: does the response's final answer equal the reference?

Parsing and equivalence (fractions, LaTeX, sets, intervals, units) come from math-verify;
this module only decides what is gold and what is the prediction.
"""

from __future__ import annotations

import logging
import threading

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

_GOLD_CONFIG = [LatexExtractionConfig(), ExprExtractionConfig()]
_TIMEOUT_SECONDS = 5
# Without a timeout math-verify logs a warning on every call; we turn it off knowingly below.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def _timeout() -> int | None:
    # math-verify times out with SIGALRM, which only works on the main thread; trainer
    # threads get no timeout rather than a crash.
    return _TIMEOUT_SECONDS if threading.current_thread() is threading.main_thread() else None


def parse_reference(answer: str) -> list:
    """Parse a reference answer (LaTeX without $ delimiters, or a plain number)."""
    return parse(f"${answer}$", extraction_config=_GOLD_CONFIG, parsing_timeout=_timeout())


def math_answer_reward(response: str, answer: str) -> float:
    """1.0 when the response's final answer (\\boxed{...} preferred) equals `answer`, else 0.0."""
    gold = parse_reference(answer)
    predicted = parse(response, parsing_timeout=_timeout())
    if not gold or not predicted:
        return 0.0
    return 1.0 if verify(gold, predicted, timeout_seconds=_timeout()) else 0.0
