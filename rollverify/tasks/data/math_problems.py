"""Math problems from a local file of any common format (rollverify/tasks/data/records.py reads it),
with what was skipped and why.

The default fields read, without any mapping (docs/data.md):
- rllm-style JSON (the shipped data/math/*.json, from agentica-project/rllm; see
  PROVENANCE.md in rollverify/assets/data/math): `problem` and `answer`, else the answer after
  "#### " at the end of `solution` (gsm8k_test.json: `answer` is null, the solution ends
  "#### 2,125"; thousands separators are dropped). amc.json's answers are JSON floats (142.0)
  where the problem wants an integer: "142". math_train.json has records whose answer is null
  or empty: skipped, and counted by reason.
- verl/DAPO Parquet: `prompt` is a list of chat messages, the answer `reward_model.ground_truth`.
- the common Hugging Face math sets: `question`, `Problem`, ...; `final_answer`, `Answer`,
  `ground_truth`, a worked `solution` whose last \\boxed{} is the answer.
Answers may be strings, numbers or lists of them (any listed answer counts as correct); each
is stripped of surrounding whitespace and $.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollverify.config.math_prompts import ANSWER_FIELDS, PROMPT_FIELDS
from rollverify.infra.paths import ASSETS, HUB_DATA, is_hub_data, locate
from rollverify.tasks.data.problem_set import (
    ProblemSet,
    first_usable,
    lookup,
    sort_records,
)
from rollverify.tasks.data.records import read_records

MATH_DATA_DIR = ASSETS / "data" / "math"
# A worked solution: only its "#### x" or last \boxed{x} is an answer, never the whole text.
WORKED_FIELDS = frozenset({"solution"})

NO_PROMPT = "no prompt"  # none of the prompt fields is there (or it is null)
EMPTY_PROMPT = "empty prompt"  # blank text, or chat messages without content
BAD_PROMPT = "bad prompt"  # neither text nor a list of {role, content} messages
NO_ANSWER = "no answer"  # none of the answer fields is there (null, "None", NaN)
EMPTY_ANSWER = "empty answer"  # blank text (or "$$"), an empty list
BAD_ANSWER = "bad answer"  # not text, a number or a list of them (true/false, a record)

_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)

Answer = str | tuple[str, ...]  # several: any of them is correct


@dataclass(frozen=True)
class MathProblem:
    """One problem with its reference answer(s) (LaTeX or plain strings, no surrounding $)."""

    problem: str  # the text (for chat prompts: the last user message)
    answer: Answer  # one string, or a tuple of the several accepted ones
    source: str  # file stem, e.g. "math500"
    index: int  # position of the record in its file
    # a chat prompt, used as it is (dicts: not hashed, so that a problem stays hashable)
    messages: tuple[dict[str, str], ...] | None = field(default=None, hash=False)


@dataclass(frozen=True)
class MathSet(ProblemSet):
    """The usable problems of one file, and how many records had to be skipped and why."""

    problems: list[MathProblem]
    prompt_fields: tuple[str, ...] = PROMPT_FIELDS  # the fields tried
    answer_fields: tuple[str, ...] = ANSWER_FIELDS
    # "prompt"/"answer" -> field -> usable records that took it from that field
    fields_used: dict[str, dict[str, int]] = field(default_factory=dict)

    def fields_tried(self, reason: str) -> str:
        if reason in (NO_PROMPT, EMPTY_PROMPT, BAD_PROMPT):
            return f"; fields tried: {', '.join(self.prompt_fields)} (task.prompt_field)"
        if reason in (NO_ANSWER, EMPTY_ANSWER, BAD_ANSWER):
            return f"; fields tried: {', '.join(self.answer_fields)} (task.answer_field)"
        return ""


def load_math_set(
    path: str | Path,
    prompt_field: str | None = None,
    answer_field: str | None = None,
    defaults_if_absent: bool = False,
) -> MathSet:
    """The problems of one file (JSON list or lines, Parquet, CSV, a save_to_disk folder);
    raises ValueError naming the file if it cannot be read. `prompt_field`/`answer_field`:
    dotted paths into each record (reward_model.ground_truth); None tries the defaults.
    `defaults_if_absent`: a given field that no record of this file has is replaced by the
    defaults (eval files beside a training file of another shape).

    A relative path is from the working directory, else the package's data (data/math/...)."""
    path = path if is_hub_data(path) else (locate(path) or Path(path))
    given = [f for f in (prompt_field, answer_field) if f]
    if defaults_if_absent or not prompt_field or not answer_field:
        given += [*PROMPT_FIELDS, *ANSWER_FIELDS]
    records = read_records(path, columns={f for name in given for f in (name, name.split(".")[0])})

    def present(name: str) -> bool:
        return any(lookup(record, name) is not None for record in records)

    if defaults_if_absent:
        prompt_field = prompt_field if prompt_field and present(prompt_field) else None
        answer_field = answer_field if answer_field and present(answer_field) else None
    prompt_fields = (prompt_field,) if prompt_field else PROMPT_FIELDS
    answer_fields = (answer_field,) if answer_field else ANSWER_FIELDS

    def read(record: dict):
        return _problem(record, prompt_fields, answer_fields, bool(answer_field))

    read_ones = sort_records(records, read, ("prompt", "answer"))
    problems = [
        MathProblem(text, answer, _name(path), index, messages)
        for index, _, ((text, messages), answer) in read_ones.usable
    ]
    return MathSet(
        _name(path),
        problems,
        read_ones.skipped,
        str(path),
        read_ones.reasons,
        read_ones.examples,
        prompt_fields,
        answer_fields,
        read_ones.fields_used,
    )


def load_math_sets(
    directory: str | Path = MATH_DATA_DIR,
    prompt_field: str | None = None,
    answer_field: str | None = None,
) -> list[MathSet]:
    """Every *.json file of a folder, in name order."""
    files = sorted(Path(directory).glob("*.json"))
    if not files:
        raise ValueError(f"{directory}: no *.json math files found")
    return [load_math_set(path, prompt_field, answer_field) for path in files]


def _name(path: str | Path) -> str:
    if is_hub_data(path):
        return str(path).removeprefix(HUB_DATA)
    return path.name if path.is_dir() else path.stem


def _problem(record: dict, prompt_fields, answer_fields, explicit: bool):
    """(((text, messages), answer), (prompt field, answer field)), None) for a usable record,
    else (None, reason)."""
    prompt, prompt_from, reason = first_usable(
        record, prompt_fields, lambda value, _: _prompt(value), NO_PROMPT
    )
    if prompt is None:
        return None, reason
    answer, answer_from, reason = first_usable(
        record, answer_fields, lambda value, name: _answer(value, name, explicit), NO_ANSWER
    )
    if answer is None:
        return None, reason
    return ((prompt, answer), (prompt_from, answer_from)), None


def _prompt(value: Any) -> tuple[tuple[str, tuple | None] | None, str]:
    if value is None:
        return None, NO_PROMPT
    if isinstance(value, str):
        return ((value, None), "") if value.strip() else (None, EMPTY_PROMPT)
    if not isinstance(value, (list, tuple)):
        return None, BAD_PROMPT
    messages = []
    for message in value:
        if not (
            isinstance(message, dict)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        ):
            return None, BAD_PROMPT
        messages.append({"role": message["role"], "content": message["content"]})
    if not any(m["content"].strip() for m in messages):
        return None, EMPTY_PROMPT
    users = [m["content"] for m in messages if m["role"] == "user"] or [messages[-1]["content"]]
    return (users[-1], tuple(messages)), ""


def _answer(value: Any, name: str, explicit: bool) -> tuple[Answer | None, str]:
    worked = name.split(".")[-1] in WORKED_FIELDS and not explicit
    if isinstance(value, (list, tuple)):
        answers, reasons = [], set()
        for item in value:
            if isinstance(item, (list, tuple, dict)):
                return None, BAD_ANSWER
            answer, reason = _one_answer(item, worked)
            if answer is None:
                reasons.add(reason)
            elif answer not in answers:
                answers.append(answer)
        if not answers:
            return None, BAD_ANSWER if BAD_ANSWER in reasons else EMPTY_ANSWER
        return (answers[0] if len(answers) == 1 else tuple(answers)), ""
    return _one_answer(value, worked)


def _one_answer(value: Any, worked: bool) -> tuple[str | None, str]:
    if value is None:
        return None, NO_ANSWER
    if isinstance(value, (bool, dict)):
        return None, BAD_ANSWER
    if isinstance(value, float):
        if math.isnan(value):
            return None, NO_ANSWER
        if math.isinf(value):
            return None, BAD_ANSWER
        return (str(int(value)) if value.is_integer() else repr(value)), ""
    if isinstance(value, int):
        return str(value), ""
    if not isinstance(value, str):
        return None, BAD_ANSWER
    final = _final_answer(value)
    if final is None and worked:  # a worked solution that states no final answer
        return None, NO_ANSWER
    text = _strip(final if final is not None else value)
    if text == "None":
        return None, NO_ANSWER
    return (text, "") if text else (None, EMPTY_ANSWER)


def _final_answer(text: str) -> str | None:
    """The answer a worked solution ends with: after "#### " (gsm8k; thousands separators
    dropped), else in its last \\boxed{}; None if it states neither."""
    if match := _GSM8K_FINAL.search(text):
        return match.group(1).replace(",", "")
    return last_boxed(text)


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (braces matched), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for position in range(begin - 1, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if depth == 0:
            return text[begin:position]
    return None


def _strip(text: str) -> str:
    """Without surrounding whitespace and $ delimiters ($x$, $$x$$; not a lone $5)."""
    text = text.strip()
    while len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = text[1:-1].strip()
    return text
