"""Math data of your own, in any common local format (rollverify/tasks/data/records.py and
math_problems.py): what loads, what is skipped and why, and the one line a broken file gets,
through the library and through `rvctl data check` (exit 2, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from transformers import AutoTokenizer

from rollverify.config import ConfigError, load_config
from rollverify.config.math_prompts import DAPO_TEMPLATE, INSTRUCTION
from rollverify.config.run_config import missing_data
from rollverify.tasks.data.hub_data import HubData, parse
from rollverify.tasks.data.math_problems import MATH_DATA_DIR, load_math_set
from rollverify.tasks.math_task import MathTask, ProblemFiles, set_name
from rollverify.tasks.rewards.math_answer import math_answer_reward
from tests.math_records import CHAT_TEMPLATE, FLAT, VERL, write

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = [(r["problem"], r["answer"]) for r in FLAT]


def loaded(math_set) -> list[tuple]:
    return [(p.problem, p.answer) for p in math_set.problems]


@pytest.mark.parametrize("name", ["list.json", "lines.json", "lines.jsonl", "t.parquet", "t.csv"])
def test_every_format_loads_the_same_problems(tmp_path, name):
    path = tmp_path / name
    if name == "lines.json":  # JSON lines under .json, as many exports name them
        path.write_text("".join(json.dumps(r) + "\n" for r in FLAT))
    else:
        write(path, FLAT)
    math_set = load_math_set(path)
    assert loaded(math_set) == EXPECTED
    assert math_set.skipped == 0 and math_set.file == str(path)


def test_csv_values_stay_text_as_written(tmp_path):
    path = tmp_path / "numbers.csv"
    path.write_text("question,answer\nq0,007\nq1,3.50\nq2,1e3\nq3,\n")
    math_set = load_math_set(path)
    assert loaded(math_set) == [("q0", "007"), ("q1", "3.50"), ("q2", "1e3")]
    assert math_set.reasons == {"no answer": 1}


def test_a_folder_written_by_save_to_disk_loads(tmp_path):
    assert loaded(load_math_set(write(tmp_path / "saved", FLAT))) == EXPECTED
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_list(FLAT)})
    splits.save_to_disk(str(tmp_path / "splits"))
    assert loaded(load_math_set(tmp_path / "splits")) == EXPECTED


def test_a_data_folder_is_data_only_its_code_never_runs(tmp_path):
    """A dataset loading script, a pickle: code that a loader could run. Ours reads Arrow and
    JSON (save_to_disk's files), nothing else; neither file is ever executed."""
    folder, ran = tmp_path / "scripted", tmp_path / "ran"
    folder.mkdir()
    code = f"open({str(ran)!r}, 'w').write('ran')\n"
    (folder / "scripted.py").write_text(code)  # a loading script, named as datasets wanted
    (folder / "data.pkl").write_bytes(b"cos\nsystem\n(Vtouch " + str(ran).encode() + b"\ntR.")
    with pytest.raises(ValueError, match="not one written by Dataset.save_to_disk"):
        load_math_set(folder)
    saved = write(tmp_path / "saved", FLAT)  # save_to_disk's folder, with both beside it
    (saved / "saved.py").write_text(code)
    (saved / "data.pkl").write_bytes((folder / "data.pkl").read_bytes())
    assert loaded(load_math_set(saved)) == EXPECTED
    assert not ran.exists()


def test_verl_parquet_reads_chat_prompts_and_the_nested_ground_truth(tmp_path):
    math_set = load_math_set(write(tmp_path / "dapo.parquet", VERL))
    assert loaded(math_set) == [("What is 2 + 2?", "4"), ("What is 3 + 3?", "6")]
    assert math_set.problems[1].messages == tuple(VERL[1]["prompt"])
    assert math_set.reasons == {"empty prompt": 1} and math_set.examples == {"empty prompt": 2}
    assert math_set.fields_used == {
        "prompt": {"prompt": 2},
        "answer": {"reward_model.ground_truth": 2},
    }


def test_answers_may_be_lists_numbers_or_text_with_dollars_and_newlines(tmp_path):
    answers = [
        ["$1$", " 2\n"],  # several: any counts
        ["\\frac{1}{2}"],  # one in a list: that one
        142.0,  # a float where an integer is meant
        3,
        2.5,
        "$\\frac{1}{2}$\n",
        "  $$x^2$$  ",
        "$5",  # a lone $ is part of the answer
        None,
        "None",
        "",
        "$ $",
        [],
        True,
        {"value": 1},
        [["1"]],
    ]
    path = tmp_path / "answers.json"
    path.write_text(json.dumps([{"problem": f"p{i}", "answer": a} for i, a in enumerate(answers)]))
    math_set = load_math_set(path)
    assert [p.answer for p in math_set.problems] == [
        ("1", "2"),
        "\\frac{1}{2}",
        "142",
        "3",
        "2.5",
        "\\frac{1}{2}",
        "x^2",
        "$5",
    ]
    assert math_set.reasons == {"no answer": 2, "empty answer": 3, "bad answer": 3}
    assert math_set.examples == {"no answer": 8, "empty answer": 10, "bad answer": 13}


def test_the_common_field_names_are_read_without_a_mapping(tmp_path):
    records = [
        {"question": "q0", "final_answer": ["$\\sqrt{2}$"]},  # OlympiadBench
        {"Problem": "q1", "Answer": 7},
        {"problem": "q2", "solution": "so \\boxed{\\frac{3}{4}} and we are done"},  # MATH
        {"question": "q3", "answer": "adding, 1,000 + 234 = 1,234\n#### 1,234"},  # gsm8k
        {"question": "q4", "ground_truth": "9"},
        {"problem": "q5", "solution": "a worked solution that states no final answer"},
        {"text": "q6", "answer": "1"},
    ]
    math_set = load_math_set(write(tmp_path / "mixed.jsonl", records))
    assert loaded(math_set) == [
        ("q0", "\\sqrt{2}"),
        ("q1", "7"),
        ("q2", "\\frac{3}{4}"),
        ("q3", "1234"),
        ("q4", "9"),
    ]
    assert math_set.reasons == {"no answer": 1, "no prompt": 1}


def test_named_fields_are_dotted_paths_and_the_only_ones_read(tmp_path):
    records = [
        {"extra": {"q": "nested q"}, "gt": {"value": ["5", "five"]}, "answer": "0"},
        {"extra": {"q": "no gt"}, "problem": "p", "answer": "0"},  # not the named fields
    ]
    path = write(tmp_path / "named.parquet", records)
    math_set = load_math_set(path, prompt_field="extra.q", answer_field="gt.value")
    assert loaded(math_set) == [("nested q", ("5", "five"))]
    assert math_set.reasons == {"no answer": 1}
    only_answer = load_math_set(path, answer_field="gt.value")  # the prompt: the defaults
    assert loaded(only_answer) == [] and only_answer.reasons == {"no prompt": 1, "no answer": 1}
    only_prompt = load_math_set(path, prompt_field="extra.q")
    assert loaded(only_prompt) == [("nested q", "0"), ("no gt", "0")]
    # an eval file without the named fields falls back to the defaults, if asked to
    shipped = load_math_set(MATH_DATA_DIR / "aime24.json", "extra.q", "gt.value", True)
    assert len(shipped.problems) == 30


def test_the_shipped_rllm_files_load_as_before():
    gsm8k = load_math_set("data/math/gsm8k_test.json")
    assert len(gsm8k.problems) == 1319 and gsm8k.problems[0].answer == "18"
    assert gsm8k.fields_used["answer"] == {"solution": 1319}
    train = load_math_set(MATH_DATA_DIR / "math_train.json")
    assert train.reasons == {"no answer": 2, "empty answer": 2}


BROKEN = {  # file -> (content, what the one line must say)
    "empty.json": ("", "empty file"),
    "empty.parquet": ("", "empty file"),
    "blank.csv": ("\n\n", "empty file"),
    "none.json": ("[]", "the file has no records"),
    "header.csv": ("problem,answer\n", "the file has no records"),
    "broken.json": ('[{"problem": "p", ', "cannot read as JSON"),
    "object.json": ('{"problem": "p", "answer": "1"}', "expected a JSON list of records"),
    "parquet.json": (None, "not a JSON file: its content looks like Parquet"),
    "json.parquet": (json.dumps(FLAT), "not a Parquet file: its content looks like JSON"),
    "parquet.csv": (None, "not a CSV file: its content looks like Parquet"),
    "notes.txt": ("problem: 1 + 1", "unknown format '.txt'"),
    "answerless.json": (
        json.dumps([{"problem": "p"}, {"problem": "q", "answer": None}, {"text": "r"}]),
        "most common reason: no answer (2 records, e.g. record 0); fields tried: answer,",
    ),
    "promptless.jsonl": (
        '{"text": "p", "answer": 1}\n',
        "most common reason: no prompt (1 records, e.g. record 0); fields tried: prompt,",
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_file_gets_one_line_naming_it_and_why(tmp_path, name, rvctl):
    content, reason = BROKEN[name]
    path = tmp_path / name
    if content is None:  # a Parquet file under another name
        write(tmp_path / "real.parquet", FLAT).rename(path)
    else:
        path.write_text(content)
    with pytest.raises(ValueError) as error:
        load_math_set(path).require_usable()
    assert str(path) in str(error.value) and reason in str(error.value)
    assert "\n" not in str(error.value)
    done = rvctl("data", "check", str(path), "--format", "json")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"error: {error.value}"]


def test_check_reports_usable_and_skipped_records_by_reason(tmp_path, rvctl):
    path = write(tmp_path / "dapo.parquet", VERL)
    done = rvctl("data", "check", str(path), "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {k: report[k] for k in ("file", "records", "usable", "skipped", "reasons")} == {
        "file": str(path),
        "records": 3,
        "usable": 2,
        "skipped": 1,
        "reasons": {"empty prompt": 1},
    }
    assert report["examples"] == {"empty prompt": 2}
    table = rvctl("data", "check", str(path))
    assert table.returncode == 0 and "3 records, 2 usable, 1 skipped" in table.stdout
    assert "empty prompt" in table.stdout
    shipped = rvctl("data", "check", "data/math/amc.json", "--format", "json")  # found by name
    assert shipped.returncode == 0 and json.loads(shipped.stdout)["usable"] == 83
    # a named field that no record has: nothing usable, exit 2, the reason in one line
    named = rvctl("data", "check", str(path), "--answer-field", "reward_model.answer")
    assert named.returncode == 2 and "Traceback" not in named.stderr
    (line,) = named.stderr.splitlines()
    assert str(path) in line and "no answer" in line and "reward_model.answer" in line


@pytest.fixture(scope="module")
def embedded_tokenizer():
    """The shipped model's tokenizer: it has no chat template of its own."""
    tokenizer = AutoTokenizer.from_pretrained(load_config().model_path())
    assert not tokenizer.chat_template
    return tokenizer


def math_task(tokenizer, train: Path, **options) -> MathTask:
    files = ProblemFiles(str(train), str(train), seed=0, eval_size=4, eval_seed=1, **options)
    return MathTask(tokenizer, files)


def test_chat_prompts_go_through_the_chat_template_as_they_are(tmp_path, embedded_tokenizer):
    path = write(tmp_path / "dapo.parquet", VERL)
    tokenizer = AutoTokenizer.from_pretrained(load_config().model_path())
    tokenizer.chat_template = CHAT_TEMPLATE
    for task_tokenizer in (tokenizer, embedded_tokenizer):
        task = math_task(task_tokenizer, path, prompt_template="dapo")  # not for chat prompts
        groups = {tuple(task.next_group().prompt_ids.tolist()): None for _ in range(2)}
        expected = set()
        for record in VERL[:2]:
            if task_tokenizer.chat_template:
                ids = tokenizer.apply_chat_template(
                    record["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True
                )["input_ids"]
            else:  # no chat template: the messages' text, one blank line apart
                text = "\n\n".join(m["content"] for m in record["prompt"])
                ids = task_tokenizer(text)["input_ids"]
            expected.add(tuple(ids))
        assert set(groups) == expected


def test_plain_problems_get_the_prompt_template(tmp_path):
    from tests.test_math_task import char_tokenizer

    tokenizer, path = char_tokenizer(), write(tmp_path / "flat.json", FLAT[:1])
    problem = FLAT[0]["problem"]
    for template, content in [
        ("boxed", f"{problem}\n\n{INSTRUCTION}"),
        ("dapo", DAPO_TEMPLATE.replace("{problem}", problem)),
        ("Q: {problem} A:", f"Q: {problem} A:"),
    ]:
        ids = math_task(tokenizer, path, prompt_template=template).next_group().prompt_ids
        text = f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"
        assert tokenizer.decode(ids) == text
    assert "Answer: $Answer" in DAPO_TEMPLATE
    with pytest.raises(ValueError, match="task.prompt_template"):
        math_task(tokenizer, path, prompt_template="no placeholder")


def test_eval_files_are_sets_read_with_the_defaults_where_they_lack_the_named_fields(tmp_path):
    from tests.test_math_task import char_tokenizer

    train = write(tmp_path / "train.parquet", [{"q": "What is 1 + 1?", "gt": ["2"]}])
    files = ProblemFiles(
        str(train),
        "unused.json",
        seed=0,
        eval_size=5,
        eval_seed=1,
        eval_files={"aime24": "data/math/aime24.json", "mine": str(train)},
        prompt_field="q",
    )
    task = MathTask(char_tokenizer(), files, answer_field="gt")
    sets = task.eval_sets()
    assert list(sets) == ["aime24", "mine"] and [len(s) for s in sets.values()] == [5, 1]
    assert task.next_group().answer == "2" and sets["mine"][0].answer == "2"


def test_training_refuses_a_file_without_usable_problems_in_one_line(tmp_path):
    path = tmp_path / "answerless.json"
    path.write_text(json.dumps([{"problem": "p", "answer": ""}] * 3 + [{"problem": "q"}]))
    with pytest.raises(ValueError) as error:  # the eval file is fine: the training file is not
        aime = "data/math/aime24.json"
        MathTask(None, ProblemFiles(str(path), aime, seed=0, eval_size=4, eval_seed=1))
    assert str(error.value).startswith(f"{path}: no usable problems in 4 records")
    assert "most common reason: empty answer (3 records, e.g. record 0)" in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("response", "answer", "reward"),
    [
        ("Let me see.\nAnswer: (1, 2)", "(1,2)", 1.0),  # math-verify alone reads 2
        ("First 3, then 8.\nAnswer: x^2+1", "x^2+1", 1.0),  # math-verify alone reads 8
        ("**Answer:** $\\frac{1}{2}$.", "0.5", 1.0),
        ("Answer: 4", "5", 0.0),
        ("so \\boxed{7}", ("5", "7"), 1.0),  # any listed answer counts
        ("so \\boxed{7}", ["5", "6"], 0.0),  # a list, as a checkpoint's JSON gives it back
        ("Answer: 7", [], 0.0),
    ],
)
def test_the_reward_reads_the_answer_line_and_any_of_several_answers(response, answer, reward):
    assert math_answer_reward(response, answer) == reward


def test_the_config_names_a_bad_template_or_field(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("task: {prompt_template: 'no placeholder', answer_field: ' '}")
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert any(p.startswith("task.prompt_template:") for p in error.value.problems)
    assert any(p.startswith("task.answer_field:") for p in error.value.problems)
    config.write_text("task: {prompt_template: dapo, answer_field: reward_model.ground_truth}")
    assert load_config(config).task.prompt_template == "dapo"
    config.write_text("task: {prompt_template: 'Q: {problem} A:'}")
    assert load_config(config).task.prompt_template == "Q: {problem} A:"


@pytest.mark.parametrize("name", ["wrong.jsonl", "wrong.csv"])
def test_records_without_the_known_fields_are_counted_not_lost(tmp_path, name):
    math_set = load_math_set(write(tmp_path / name, [{"x": "1", "y": "2"}, {"x": "3", "y": "4"}]))
    assert math_set.problems == [] and math_set.skipped == 2
    assert math_set.reasons == {"no prompt": 2}


def test_a_hub_dataset_is_named_in_a_config_and_refused_in_one_line_when_offline(
    tmp_path, monkeypatch
):
    """hf:OWNER/NAME[:CONFIG][@SPLIT] is not a missing file; offline and not in the datasets
    cache it is one line naming it and the way out. (Reading a cached or downloaded hub
    dataset needs the hub, which this machine cannot reach.)"""
    spec = "hf:someone/no-such-math:main@test"
    config = load_config(overrides={"task.name": "math", "task.train_file": spec})
    assert config.task.train_file == spec and missing_data(config) == []
    assert parse(spec) == HubData("someone/no-such-math", "main", "test")
    assert parse("hf:someone/math").split == "train"
    assert set_name("hf:openai/gsm8k:main@test") == "gsm8k"  # a name MLflow takes
    assert set_name("hf:someone/math.v2") == "math.v2" and set_name("data/aime24.json") == "aime24"
    with pytest.raises(ValueError, match="a hub dataset is hf:OWNER/NAME"):
        parse("hf:no-owner")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    with pytest.raises(ValueError) as error:
        load_math_set(spec)
    (line,) = str(error.value).splitlines()
    assert line.startswith(f"{spec}: not in the local datasets cache and the hub cannot be")
    assert "datasets.load_dataset('someone/no-such-math', name='main', split='test')" in line
