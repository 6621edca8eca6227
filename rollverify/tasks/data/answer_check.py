"""Check the math reward on real data: every reference answer must score 1, a wrong one 0.

This is what `rvctl data check` runs: a proof, on every record, that the loader found the right
answer and that the checker can tell right from wrong before any training depends on it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from rollverify.tasks.data.math_problems import MathSet
from rollverify.tasks.rewards.math_answer import math_answer_reward


def perturb_answer(answer: str) -> str:
    """A wrong answer close to `answer`: a number plus one, else its first digit bumped.

    Bumping the first digit (not all, not the last) changes the value of tuples, intervals,
    matrices, fractions and numbers written in a base (4210_{5}) without touching a unit's
    exponent or a base subscript. Answers without a digit get "+1".
    """
    try:
        number = float(answer)
        return str(int(number) + 1) if number.is_integer() else repr(number + 1)
    except ValueError:
        pass
    if re.search(r"\d", answer):
        return re.sub(r"\d", lambda digit: str((int(digit.group()) + 1) % 10), answer, count=1)
    return f"{answer}+1"


def boxed(answer: str) -> str:
    """A response that states `answer` the way a math model is prompted to."""
    return f"The final answer is \\boxed{{{answer}}}."


@dataclass(frozen=True)
class AnswerCheck:
    """How one file's records fared."""

    file: str
    records: int  # records in the file
    checked: int  # usable records checked
    skipped: int  # records without a usable prompt or answer (MathSet.reasons says why)
    reference_correct: int  # checked records whose own answer scored 1
    perturbed_rejected: int  # checked records whose perturbed answer scored 0
    ms_per_answer: float
    wrongly_accepted: tuple[int, ...]  # record indices whose perturbed answer scored 1


def check_answers(
    math_set: MathSet, limit: int | None = None, on_record: Callable[[], None] = lambda: None
) -> AnswerCheck:
    """Score each problem's reference answer and its perturbation with the math reward."""
    problems = math_set.problems[:limit]
    start = time.perf_counter()
    correct, accepted = 0, []
    for problem in problems:
        # Several accepted answers: each must score 1; the first one is perturbed.
        answers = [problem.answer] if isinstance(problem.answer, str) else list(problem.answer)
        correct += all(math_answer_reward(boxed(a), problem.answer) == 1.0 for a in answers)
        if math_answer_reward(boxed(perturb_answer(answers[0])), problem.answer) != 0.0:
            accepted.append(problem.index)
        on_record()
    elapsed = time.perf_counter() - start
    return AnswerCheck(
        file=math_set.name,
        records=math_set.records,
        checked=len(problems),
        skipped=math_set.skipped,
        reference_correct=correct,
        perturbed_rejected=len(problems) - len(accepted),
        ms_per_answer=round(1000 * elapsed / max(1, 2 * len(problems)), 2),
        wrongly_accepted=tuple(accepted),
    )
