"""What the problem files of every task share (math_problems.py, code_problems.py): each
record is read into a problem or skipped with a reason, and the file's report says how many
of each, which fields the usable ones came from, and, when none is usable, why, in one line.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

NOT_A_RECORD = "not a record"  # a JSON list item that is not an object

# read(record) -> ((what it made of the record, the field each part came from), None), or
# (None, why the record is skipped)
RecordReader = Callable[[Any], tuple[tuple[Any, tuple[str, ...]] | None, str | None]]


@dataclass(frozen=True)
class ProblemSet:
    """The usable problems of one file, and how many records had to be skipped and why."""

    name: str
    problems: list
    skipped: int
    file: str = ""
    reasons: dict[str, int] = field(default_factory=dict)  # reason -> records, most first
    examples: dict[str, int] = field(default_factory=dict)  # reason -> first record index

    KIND: ClassVar[str] = "problems"  # in "no usable ... in N records"
    CHECK: ClassVar[str] = "`rvctl data check FILE`"  # the command that lists every reason

    @property
    def records(self) -> int:
        return len(self.problems) + self.skipped

    def fields_tried(self, reason: str) -> str:
        """The fields tried for the part `reason` is about, as a hint (a subclass's)."""
        return ""

    def require_usable(self):
        """Itself, or a ValueError in one line naming the file and the most common reason."""
        if self.problems:
            return self
        where = self.file or self.name
        if not self.records:
            raise ValueError(f"{where}: no usable problems: the file has no records")
        reason, count = next(iter(self.reasons.items()))
        raise ValueError(
            f"{where}: no usable {self.KIND} in {self.records} records; most common reason: "
            f"{reason} ({count} records, e.g. record {self.examples[reason]})"
            f"{self.fields_tried(reason)}; {self.CHECK} lists every reason"
        )


@dataclass
class SortedRecords:
    """A file's records, read: the usable ones and the tally of the rest."""

    usable: list[tuple[int, Any, Any]]  # (record index, record, what read made of it)
    reasons: dict[str, int]  # reason -> records skipped for it, most first
    examples: dict[str, int]  # reason -> first record index
    fields_used: dict[str, dict[str, int]]  # part -> field -> usable records that took it

    @property
    def skipped(self) -> int:
        return sum(self.reasons.values())


def sort_records(records: Iterable[Any], read: RecordReader, parts: tuple[str, ...]):
    """Each record read (`read`): usable, or skipped and counted by its reason; `parts` names
    the fields read returns, in order ("prompt", "answer")."""
    usable, reasons, examples = [], Counter(), {}
    used = {part: Counter() for part in parts}
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            value, reason = None, NOT_A_RECORD
        else:
            value, reason = read(record)
        if value is None:
            reasons[reason] += 1
            examples.setdefault(reason, index)
            continue
        problem, fields_from = value
        for part, name in zip(parts, fields_from, strict=True):
            used[part][name] += 1
        usable.append((index, record, problem))
    fields_used = {part: dict(counts.most_common()) for part, counts in used.items()}
    return SortedRecords(usable, dict(reasons.most_common()), examples, fields_used)


def first_usable(record: dict, fields: Iterable[str], read: Callable, missing: str):
    """(value, field, None) of the first field whose value `read(value, field)` makes usable;
    else (None, None, reason): the first reason other than `missing` a field gave (it is there
    but unusable), else `missing`."""
    reason = missing
    for name in fields:
        value, why = read(lookup(record, name), name)
        if value is not None:
            return value, name, None
        if reason == missing:
            reason = why
    return None, None, reason


def lookup(record: Any, path: str) -> Any:
    """The value at a dotted path (reward_model.ground_truth, prompt.0.content); None if absent.
    A key that holds the dots itself is taken first."""
    if isinstance(record, dict) and path in record:
        return record[path]
    node = record
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
