"""Data files that are hub datasets: `hf:OWNER/NAME[:CONFIG][@SPLIT]` in task.train_file or an
eval file (`hf:BytedTsinghua-SIA/DAPO-Math-17k`, `hf:openai/gsm8k:main@test`), read through
`datasets.load_dataset(OWNER/NAME, name=CONFIG, split=SPLIT)` into the same records a local file
gives. The split defaults to `train`; `datasets` keeps what it downloads in its cache, so a
second run reads it there (and offline). Offline and not cached: one line naming the field's
value and what to do."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

_SPEC = re.compile(r"hf:([\w.-]+/[\w.-]+)(?::([\w.-]+))?(?:@([\w.\-\[\]:%]+))?")


@dataclass(frozen=True)
class HubData:
    repo: str
    config: str | None
    split: str


def parse(spec: str) -> HubData:
    """`hf:OWNER/NAME[:CONFIG][@SPLIT]`; ValueError naming the expected form."""
    match = _SPEC.fullmatch(spec)
    if match is None:
        raise ValueError(
            f"{spec}: a hub dataset is hf:OWNER/NAME, with :CONFIG and @SPLIT if needed "
            "(hf:openai/gsm8k:main@test)"
        )
    repo, config, split = match.groups()
    return HubData(repo, config, split or "train")


def read_hub_records(spec: str, columns: Collection[str] | None = None) -> list[Any]:
    """The records of the hub dataset `spec` (downloaded into datasets' cache if need be)."""
    import datasets

    data = parse(spec)
    try:
        dataset = datasets.load_dataset(data.repo, name=data.config, split=data.split)
    except Exception as error:  # offline, no such dataset, config or split: one line
        raise ValueError(f"{spec}: {_reason(error, data)}") from None
    if columns is not None:
        dataset = dataset.select_columns([c for c in dataset.column_names if c in columns])
    return dataset.to_list()


def _reason(error: Exception, data: HubData) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if "Offline" in text or "offline" in text or isinstance(error, ConnectionError):
        return (
            "not in the local datasets cache and the hub cannot be reached "
            f"({text}); load it once where there is a network "
            f"(datasets.load_dataset({data.repo!r}, name={data.config!r}, split={data.split!r})) "
            "or point to a local file"
        )
    return f"cannot be loaded from the hub ({text})"
