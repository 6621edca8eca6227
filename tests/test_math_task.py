"""The real-math task of the GPU config: chat-template prompts, a seeded order that resumes
from a position alone, and rewards of token ids (rollverify/tasks/math_task.py)."""

from __future__ import annotations

import json
import string

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rollverify.tasks.data.math_problems import MATH_DATA_DIR
from rollverify.tasks.math_task import INSTRUCTION, MathTask, ProblemFiles

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen's template, reduced to what a single user turn uses.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def char_tokenizer(chat_template: str | None = CHAT_TEMPLATE) -> PreTrainedTokenizerFast:
    """One token per printable character, plus Qwen's special tokens: built here, no hub."""
    vocab = {token: i for i, token in enumerate([*SPECIAL, "<unk>", *string.printable])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = chat_template
    return tokenizer


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    """A small training file (problems numbered so that each is recognisable)."""
    path = tmp_path_factory.mktemp("math") / "train.json"
    records = [{"problem": f"What is {i} + 0?", "answer": str(i)} for i in range(7)]
    path.write_text(json.dumps(records))
    return path


def task(problems, seed: int = 0, tokenizer=None) -> MathTask:
    eval_file = str(MATH_DATA_DIR / "math500.json")
    files = ProblemFiles(str(problems), eval_file, seed=seed, eval_size=4, eval_seed=1)
    return MathTask(tokenizer or char_tokenizer(), files)


def drawn(math_task: MathTask, count: int) -> list[str]:
    return [math_task.next_group().answer for _ in range(count)]


def test_prompts_go_through_the_chat_template(problems):
    tokenizer = char_tokenizer()
    group = task(problems, tokenizer=tokenizer).next_group()
    text = tokenizer.decode(group.prompt_ids)
    problem = f"What is {group.answer} + 0?"
    assert (
        text == f"<|im_start|>user\n{problem}\n\n{INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n"
    )
    expected = tokenizer.apply_chat_template(
        [{"role": "user", "content": f"{problem}\n\n{INSTRUCTION}"}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )["input_ids"]
    assert group.prompt_ids.tolist() == list(expected)
    assert group.prompt_ids.dtype == torch.long


def test_a_tokenizer_without_a_chat_template_gets_the_plain_prompt(problems):
    tokenizer = char_tokenizer(chat_template=None)
    group = task(problems, tokenizer=tokenizer).next_group()
    assert tokenizer.decode(group.prompt_ids) == f"What is {group.answer} + 0?\n\n{INSTRUCTION}"


def test_each_epoch_visits_every_problem_once_in_its_own_seeded_order(problems):
    math_task = task(problems, seed=0)
    epochs = [drawn(math_task, 7) for _ in range(3)]
    assert all(sorted(epoch) == [str(i) for i in range(7)] for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) > 1, "each epoch is shuffled anew"
    assert drawn(task(problems, seed=0), 7) == epochs[0], "the same seed, the same order"
    assert drawn(task(problems, seed=1), 7) != epochs[0], "another seed, another order"


def test_the_order_resumes_from_its_position_alone(problems):
    straight = task(problems, seed=3)
    expected = drawn(straight, 17)
    stopped = task(problems, seed=3)
    drawn(stopped, 9)
    state = json.loads(json.dumps(stopped.state_dict()))
    resumed = task(problems, seed=3)
    resumed.load_state_dict(state)
    ids = [resumed.next_group() for _ in range(8)]
    assert [g.answer for g in ids] == expected[9:]
    assert [g.group_id for g in ids] == list(range(9, 17))


def test_eval_problems_are_fixed_by_the_eval_seed(problems):
    first = task(problems, seed=0).eval_problems()
    again = task(problems, seed=5).eval_problems()
    assert len(first) == 4
    assert [p.answer for p in first] == [p.answer for p in again]
    assert all(torch.equal(a.prompt_ids, b.prompt_ids) for a, b in zip(first, again, strict=True))


@pytest.mark.parametrize(
    ("response", "reward"),
    [
        ("So the answer is \\boxed{5}.<|im_end|><|endoftext|><|endoftext|>", 1.0),
        ("<|im_start|>5<|im_end|>", 1.0),  # read with the special tokens, this scores 0
        ("So the answer is \\boxed{6}.<|im_end|>", 0.0),
    ],
)
def test_rewards_of_token_ids_read_the_text_without_special_tokens(problems, response, reward):
    tokenizer = char_tokenizer()
    math_task = task(problems, tokenizer=tokenizer)
    ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == response
    assert math_task.reward_tokens(ids, "5") == reward
