"""experiments/qwen3-8b-dapo-math.yaml as a user runs it: it loads anywhere; training refuses
to start, naming the file, until DAPO-Math-17k's Parquet is where task.train_file says; then
the task reads its chat prompts and answers, and evaluates on the three shipped sets with the
DAPO template (the 8B model is swapped for the embedded tiny one: no hub here)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer

from rollverify.config import ConfigError, load_config
from rollverify.config.math_prompts import DAPO_TEMPLATE
from rollverify.training.parts import make_task

CONFIG = "experiments/qwen3-8b-dapo-math.yaml"


def dapo_parquet(path):
    """Two records shaped as DAPO-Math-17k's (verl): chat prompts, reward_model.ground_truth."""
    prompts = [
        [{"role": "user", "content": DAPO_TEMPLATE.replace("{problem}", "What is 2 + 2?")}],
        [{"role": "user", "content": DAPO_TEMPLATE.replace("{problem}", "What is 3 + 4?")}],
    ]
    table = pa.table(
        {
            "data_source": ["math_dapo", "math_dapo"],
            "prompt": prompts,
            "reward_model": [{"ground_truth": "4"}, {"ground_truth": "7"}],
        }
    )
    pq.write_table(table, path)


def test_the_paper_config_needs_its_training_file_then_reads_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(CONFIG)  # loads without the data: simulate and report need none
    assert config.task.eval_files.keys() == {"aime24", "amc", "math500"}
    with pytest.raises(ConfigError) as refused:
        config.check_data()
    assert refused.value.problems[0].startswith("task.train_file: no file dapo-math-17k.parquet")

    dapo_parquet(tmp_path / "dapo-math-17k.parquet")
    tiny = load_config().model_path()
    config = load_config(CONFIG, {"model.path": tiny, "task.eval_size": 4})
    config.check_data()
    task = make_task(config, AutoTokenizer.from_pretrained(tiny))
    group = task.next_group()
    assert group.answer in ("4", "7")
    sets = task.eval_sets()
    assert list(sets) == ["aime24", "amc", "math500"] and all(len(s) == 4 for s in sets.values())
    # A shipped eval problem gets the DAPO instruction, as the training prompts carry it (the
    # tiny tokenizer knows only the chain's characters: read the message, not its tokens).
    (message,) = task.messages(task.eval_sets_problems["aime24"][0])
    assert message["content"].startswith("Solve the following math problem step by step.")
    assert task.reward("Some work.\nAnswer: 4", "4") == 1.0
