"""Real math problem sets (data/math/*.json in the package's data, rollverify/assets/, from
agentica-project/rllm; see PROVENANCE.md there).

Each file has its own quirks, handled here so that nothing downstream has to know them:
- gsm8k_test.json: `answer` is null; the answer follows "#### " at the end of `solution`,
  with thousands separators ("2,125").
- amc.json: `answer` is a JSON float (142.0) where the problem wants an integer.
- math500.json, math_train.json: LaTeX answers; math_train.json has records whose answer is
  null. Those cannot be scored and are skipped (the loader reports how many).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from rollverify.paths import ASSETS, locate

MATH_DATA_DIR = ASSETS / "data" / "math"
_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


@dataclass(frozen=True)
class MathProblem:
    """One problem with its reference answer (a LaTeX or plain string, no surrounding $)."""

    problem: str
    answer: str
    source: str  # file stem, e.g. "math500"
    index: int  # position of the record in its file


@dataclass(frozen=True)
class MathSet:
    """The usable problems of one file, and how many records had to be skipped."""

    name: str
    problems: list[MathProblem]
    skipped: int


def load_math_set(path: str | Path) -> MathSet:
    """Load one rllm-style JSON list of records; raises ValueError naming the file if broken.

    A relative path is from the working directory, else the package's data (data/math/...)."""
    path = locate(path) or Path(path)
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: cannot read math problems ({error})") from None
    if not isinstance(records, list):
        raise ValueError(f"{path}: expected a JSON list of records, got {type(records).__name__}")
    problems, skipped = [], 0
    for index, record in enumerate(records):
        answer = reference_answer(record) if isinstance(record, dict) else None
        if answer is None or not isinstance(record.get("problem"), str):
            skipped += 1
            continue
        problems.append(MathProblem(record["problem"], answer, path.stem, index))
    return MathSet(path.stem, problems, skipped)


def load_math_sets(directory: str | Path = MATH_DATA_DIR) -> list[MathSet]:
    """Every *.json file of a folder, in name order."""
    files = sorted(Path(directory).glob("*.json"))
    if not files:
        raise ValueError(f"{directory}: no *.json math files found")
    return [load_math_set(path) for path in files]


def reference_answer(record: dict) -> str | None:
    """The answer of a record as a string, whatever quirk its file has; None if it has none."""
    answer = record.get("answer")
    if isinstance(answer, bool):
        return None
    if isinstance(answer, float):
        return str(int(answer)) if answer.is_integer() else repr(answer)
    if isinstance(answer, int):
        return str(answer)
    if isinstance(answer, str) and answer.strip() and answer.strip() != "None":
        return answer.strip()
    solution = record.get("solution")
    if isinstance(solution, str) and (match := _GSM8K_FINAL.search(solution)):
        return match.group(1).replace(",", "")
    return None
