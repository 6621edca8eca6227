"""The records of a local data file, read through `datasets` whatever its format.

JSON (a list of records, or JSON lines), Parquet, CSV, and a folder written by
`Dataset.save_to_disk` are read by path into plain Python records (nested records as dicts,
lists as lists). Every failure is one ValueError line naming the file and the reason: an empty
file, content that is not what the extension says (a Parquet file named .json), a folder that
`datasets` did not write. `datasets` is imported here only, and only when a file is read.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Collection
from pathlib import Path
from typing import Any

from rollverify.infra.paths import is_hub_data
from rollverify.tasks.data.hub_data import read_hub_records

FORMATS = {".json": "JSON", ".jsonl": "JSON", ".parquet": "Parquet", ".csv": "CSV"}
SAVED_DATASET_FILES = ("state.json", "dataset_dict.json")  # what save_to_disk writes
SUPPORTED = (
    "a .json (list of records or JSON lines), .jsonl, .parquet or .csv file, or a folder "
    "written by Dataset.save_to_disk"
)
_PARQUET_MAGIC = b"PAR1"


def read_records(path: str | Path, columns: Collection[str] | None = None) -> list[Any]:
    """Every record of the file at `path`, in file order (a JSON list may hold non-records,
    returned as they are, for the caller to skip). `columns`: top-level fields to keep (others
    are never converted to Python: a wide Parquet file stays cheap); None keeps all."""
    if is_hub_data(path):  # hf:OWNER/NAME[:CONFIG][@SPLIT]
        return read_hub_records(str(path), columns)
    path = Path(path)
    if path.is_dir():
        return _read_saved(path, columns)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise ValueError(f"{path}: unknown format {path.suffix or '(no extension)'!r}: {SUPPORTED}")
    with path.open("rb") as file:
        head = file.read(4096)
    if not head.strip():
        raise ValueError(f"{path}: empty file")
    looks = _looks_like(head)
    if looks != kind and not (kind == "CSV" and looks == "text"):
        raise ValueError(
            f"{path}: not a {kind} file: its content looks like {_article(looks)} "
            f"(name it for what it is: {SUPPORTED})"
        )
    if kind == "JSON":
        return _read_json(path, columns)
    if kind == "CSV":
        return _read_csv(path, columns)
    return _load(
        path, "Parquet", lambda datasets: datasets.Dataset.from_parquet(str(path)), columns
    )


def _looks_like(head: bytes) -> str:
    if head.startswith(_PARQUET_MAGIC):
        return "Parquet"
    if b"\0" in head:
        return "binary"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return "JSON" if text[:1] in (b"[", b"{") else "text"


def _article(kind: str) -> str:
    return {"binary": "binary data", "text": "plain text"}.get(kind, f"{kind}")


def _read_json(path: Path, columns: Collection[str] | None) -> list[Any]:
    text = path.read_text(encoding="utf-8-sig", errors="replace").lstrip()
    if text.startswith("{"):  # JSON lines, or one object (a mistake for a list of records)
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            pass  # several lines: JSON lines
        else:
            if path.suffix.lower() == ".json":
                keys = ", ".join(list(map(str, whole))[:5])
                raise ValueError(
                    f"{path}: expected a JSON list of records (or one record per line), got "
                    f"one JSON object (keys: {keys}); for one record per line, name it .jsonl"
                )
            return [whole]
    try:
        return _load(path, "JSON", lambda datasets: datasets.Dataset.from_json(str(path)), columns)
    except ValueError:
        # Arrow cannot hold every JSON file (a list mixing records and numbers, a column of
        # records and strings): the json module can, and names what is wrong with the text.
        try:
            return _plain_json(text)
        except ValueError as plain:
            raise ValueError(f"{path}: cannot read as JSON ({plain})") from None


def _plain_json(text: str) -> list[Any]:
    try:
        records = json.loads(text)
    except json.JSONDecodeError as whole:
        if not text.startswith("{"):
            raise ValueError(str(whole)) from None
        records = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(f"line {number}: {error}") from None
        return records
    if not isinstance(records, list):
        raise ValueError(f"expected a JSON list of records, got {type(records).__name__}")
    return records


def _read_csv(path: Path, columns: Collection[str] | None) -> list[Any]:
    # Every column as text: an answer "007" or "3.50" stays as written (pandas would make it 7).
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as file:
        header = next(csv.reader(file), [])
    if not any(name.strip() for name in header):
        raise ValueError(f"{path}: not a CSV file with a header line (field names)")

    def load(datasets):
        features = datasets.Features({name: datasets.Value("string") for name in header})
        return datasets.Dataset.from_csv(str(path), features=features)

    return _load(path, "CSV", load, columns)


def _read_saved(path: Path, columns: Collection[str] | None) -> list[Any]:
    if not any((path / name).is_file() for name in SAVED_DATASET_FILES):
        raise ValueError(
            f"{path}: a folder, but not one written by Dataset.save_to_disk (no "
            f"{' or '.join(SAVED_DATASET_FILES)}); point to {SUPPORTED}"
        )

    def load(datasets):
        dataset = datasets.load_from_disk(str(path))
        if isinstance(dataset, datasets.DatasetDict):
            if len(dataset) == 1:
                return next(iter(dataset.values()))
            if "train" not in dataset:
                splits = ", ".join(dataset)
                raise ValueError(f"several splits ({splits}): point to one, e.g. {path}/<split>")
            return dataset["train"]
        return dataset

    return _load(path, "a saved dataset", load, columns)


def _load(path: Path, kind: str, load, columns: Collection[str] | None) -> list[Any]:
    import datasets

    shown = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    logger, level = logging.getLogger("datasets"), logging.getLogger("datasets").level
    logger.setLevel(logging.CRITICAL)  # its failures are reported below, in one line
    try:
        dataset = load(datasets)
        if columns is not None:
            rows = len(dataset)  # (a selection of no column has no rows)
            dataset = dataset.select_columns([c for c in dataset.column_names if c in columns])
            if not dataset.column_names:
                return [{} for _ in range(rows)]
        return dataset.to_list()
    except Exception as error:  # datasets and arrow raise many kinds; each is the file's fault
        if "corresponds to no data" in str(error):  # `[]`, a CSV header alone
            return []
        raise ValueError(f"{path}: cannot read as {kind} ({_reason(error)})") from None
    finally:
        logger.setLevel(level)
        if shown:
            datasets.enable_progress_bars()


def _reason(error: BaseException) -> str:
    """The innermost cause's first line: datasets wraps arrow's message in its own."""
    while error.__cause__ is not None or (
        error.__context__ is not None and not error.__suppress_context__
    ):
        error = error.__cause__ or error.__context__
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
