"""Math problem records as users write them (flat, verl / DAPO-Math Parquet), in each file
format: what tests/test_data_formats.py and tests/test_math_files.py read."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

FLAT = [
    {"problem": "What is 1 + 1?", "answer": "2"},
    {"problem": "Halve 1.", "answer": "\\frac{1}{2}"},
    {"problem": "What is 6 x 7?", "answer": "42"},
    {"problem": "Write 7 with three digits.", "answer": "007"},  # CSV: not the number 7
]
# verl / DAPO-Math Parquet: the prompt is chat messages, the answer nested in reward_model.
VERL = [
    {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": "What is 2 + 2?"}],
        "reward_model": {"ground_truth": "4", "style": "rule"},
    },
    {
        "data_source": "math_dapo",
        "prompt": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 3 + 3?"},
        ],
        "reward_model": {"ground_truth": "$6$\n", "style": "rule"},
    },
    {
        "data_source": "math_dapo",
        "prompt": [],
        "reward_model": {"ground_truth": "1", "style": "rule"},
    },
]
CHAT_TEMPLATE = (  # Qwen's, reduced to plain turns
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write(path: Path, records: list[dict]) -> Path:
    """`records` in the format that the file's name says (a folder: Dataset.save_to_disk)."""
    if path.suffix == ".json":
        path.write_text(json.dumps(records))
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif path.suffix == ".parquet":  # columns from every record (pyarrow takes the first's)
        columns = dict.fromkeys(key for record in records for key in record)
        pq.write_table(pa.table({c: [r.get(c) for r in records] for c in columns}), path)
    elif path.suffix == ".csv":
        with path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
    else:
        datasets.Dataset.from_list(records).save_to_disk(str(path))
    return path
