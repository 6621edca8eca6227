"""Rule-based reward for real math: does the response's final answer equal the reference?

Parsing and equivalence (fractions, LaTeX, sets, intervals, units) come from math-verify;
this module only decides what is gold and what is the prediction. The prediction is the last
\\boxed{} of the response (the default prompt asks for it), else its last "Answer: x" line (the
DAPO prompt asks for that; math-verify alone misreads "Answer: (1, 2)" as 2), else whatever
math-verify finds. A reference may be several answers: any of them counts as correct.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

_GOLD_CONFIG = [LatexExtractionConfig(), ExprExtractionConfig()]
_TIMEOUT_SECONDS = 5
# DAPO's own verifier reads the last "Answer:" the same way (case-insensitive, to line end).
_ANSWER_LINE = re.compile(r"answer\s*:\s*([^\n]+)", re.IGNORECASE)
_DELIMITERS = (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
# Without a timeout math-verify logs a warning on every call; we turn it off knowingly below.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def _timeout() -> int | None:
    # math-verify times out with SIGALRM, which only works on the main thread; trainer
    # threads get no timeout rather than a crash.
    return _TIMEOUT_SECONDS if threading.current_thread() is threading.main_thread() else None


def parse_reference(answer: str) -> list:
    """Parse a reference answer (LaTeX without $ delimiters, or a plain number)."""
    return parse(f"${answer}$", extraction_config=_GOLD_CONFIG, parsing_timeout=_timeout())


def answer_line(response: str) -> str | None:
    """What follows the last "Answer:" of a response (markdown ** and $ delimiters off)."""
    found = _ANSWER_LINE.findall(response)
    if not found:
        return None
    text = found[-1].strip().strip("*").strip()
    changed = True
    while changed:
        changed = False
        for left, right in _DELIMITERS:
            if (
                len(text) > len(left) + len(right)
                and text.startswith(left)
                and text.endswith(right)
            ):
                text, changed = text[len(left) : -len(right)].strip(), True
    text = text.rstrip(".").strip()
    return text or None


def parse_response(response: str) -> list:
    """The response's final answer, parsed (empty if it states none)."""
    if "\\boxed" not in response and (line := answer_line(response)) is not None:
        predicted = parse(f"${line}$", extraction_config=_GOLD_CONFIG, parsing_timeout=_timeout())
        if predicted:
            return predicted
    return parse(response, parsing_timeout=_timeout())


def math_answer_reward(response: str, answer: str | Sequence[str]) -> float:
    """1.0 when the response's final answer equals `answer` (or any of several), else 0.0."""
    answers = [answer] if isinstance(answer, str) else list(answer)
    golds = [gold for a in answers if (gold := parse_reference(str(a)))]
    if not golds:
        return 0.0
    predicted = parse_response(response)
    if not predicted:
        return 0.0
    return 1.0 if any(verify(g, predicted, timeout_seconds=_timeout()) for g in golds) else 0.0
