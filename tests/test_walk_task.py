"""The walk task (rollverify/tasks/walk.py): its verifier reads the whole chain, and its
problems come from the chain task's length distribution."""

import random

import pytest

from rollverify.config import load_config
from rollverify.tasks.chain import ChainProblem, ChainTaskConfig, sample_problems
from rollverify.tasks.walk import WalkProblem, WalkTask, walk_reward
from rollverify.tiny.tokenizer import build_char_tokenizer
from rollverify.training.parts import make_task

GOOD = "4;5=2:3;8=0:2;1=1:1;2=3:0#3"  # from 7, four steps
ANSWER = WalkProblem(7, 4).answer


def test_a_correct_walk_scores_one_whatever_digits_it_chose():
    assert walk_reward(GOOD, ANSWER) == 1.0
    assert walk_reward("4;1=8:3;1=9:2;1=0:1;1=1:0#1", ANSWER) == 1.0
    assert walk_reward(f"  {GOOD}\n", ANSWER) == 1.0


@pytest.mark.parametrize(
    "response",
    [
        "#3",  # only an answer
        "3;5=2:2;8=0:1;1=1:0#1",  # n restated wrong (and one step short)
        "3;5=2:3;8=0:2;1=1:1;2=3:0#3",  # n restated wrong, every step right
        "4;5=3:3;8=1:2;1=2:1;1=3:0#3",  # a wrong sum, carried on consistently
        "4;5=2:3;0=2:2;1=3:1;2=5:0#5",  # adding 0: a copy, not a step
        "4;5=2:3;8=0:1;1=1:1;2=3:0#3",  # a wrong counter
        "4;5=2:3;8=0:2;1=1:1;2=3:00#3",  # a counter written otherwise
        "4;5=2:3;8=0:2;1=1:1;2=3:0#4",  # the answer is not where the chain ends
        "4;5=2:3;8=0:2;3=3:0#3",  # a step short
        "4;5=2:2;8=0:1;3=3:0#3",  # a step short, its counters from 2
        "4;5=2:3;8=0:2;1=1:1;2=3:0;1=4:0#4",  # a step too many
        "4;5=2:3;8=0:2;1=1:1;12=3:0#3",  # a digit of two characters
        "4;7+5=2:3;2+8=0:2;0+1=1:1;1+2=3:0#3",  # the chain task's lines
        GOOD + "#3",  # trailing text
    ],
)
def test_every_broken_part_of_a_walk_scores_zero(response):
    assert walk_reward(response, ANSWER) == 0.0


def test_clean_demonstrations_score_one_and_slips_are_caught():
    rng = random.Random(0)
    problems = sample_problems(300, 1, ChainTaskConfig(48, 1.4), WalkProblem)
    assert {walk_reward(p.solution(0.0, rng), p.answer) for p in problems} == {1.0}
    assert {p.start for p in problems} == set(range(10))
    noisy = [walk_reward(p.solution(0.5, rng), p.answer) for p in problems]
    assert 0.0 < sum(noisy) / len(noisy) < 0.8  # a slip breaks the chain it is in


def test_demonstrations_choose_every_digit_but_zero_alike():
    rng, counts = random.Random(3), {}
    for _ in range(200):
        for line in WalkProblem(5, 10).solution(0.0, rng).split("#")[0].split(";")[1:]:
            digit = line[0]
            counts[digit] = counts.get(digit, 0) + 1
    assert set(counts) == set("123456789")
    assert max(counts.values()) / min(counts.values()) < 1.3  # 2000 draws, ~222 each


def test_walks_are_drawn_from_the_chain_tasks_length_distribution():
    config = ChainTaskConfig(48, 1.4)
    walks = [w.steps for w in sample_problems(4000, 7, config, WalkProblem)]
    chains = [c.steps for c in sample_problems(4000, 8, config, ChainProblem)]
    assert set(walks) <= set(range(1, 49)) and max(walks) > 40  # the tail reaches far
    for n in (1, 2):  # the same law
        assert walks.count(n) / 4000 == pytest.approx(chains.count(n) / 4000, abs=0.03)


def test_the_config_makes_a_walk_task_scored_by_its_verifier():
    tokenizer = build_char_tokenizer()
    config = load_config(overrides={"task.name": "walk", "task.max_steps": 48, "task.alpha": 1.4})
    task = make_task(config, tokenizer)
    assert isinstance(task, WalkTask)
    group = task.next_group()
    prompt = tokenizer.decode(group.prompt_ids)
    start, steps = map(int, prompt[2:-1].split("x"))
    assert group.answer == WalkProblem(start, steps).answer
    ids = tokenizer(WalkProblem(start, steps).solution())["input_ids"]
    assert task.reward_tokens(ids, group.answer) == 1.0
    assert task.reward_tokens(ids[:-1], group.answer) == 0.0
