"""The walk task (rollverify/tasks/walk.py): its verifier reads the whole chain, and its
problems come from the chain task's stream."""

import random

import pytest

from rollverify.config import load_config
from rollverify.tasks.chain import ChainProblem, ChainTaskConfig, sample_problems
from rollverify.tasks.walk import WalkProblem, WalkTask, walk_reward
from rollverify.tiny.tokenizer import WALK_CHARACTERS, build_char_tokenizer
from rollverify.training.parts import make_task

GOOD = "4;7+5=2:3;2+8=0:2;0+1=1:1;1+2=3:0#3"  # from 7 to 3 in 4 steps
ANSWER = WalkProblem(7, 3, 4).answer


def test_a_correct_walk_scores_one_whatever_digits_it_chose():
    assert walk_reward(GOOD, ANSWER) == 1.0
    assert walk_reward("4;7+0=7:3;7+0=7:2;7+0=7:1;7+6=3:0#3", ANSWER) == 1.0
    assert walk_reward(f"  {GOOD}\n", ANSWER) == 1.0


@pytest.mark.parametrize(
    "response",
    [
        "#3",  # only the target
        "3;7+5=2:2;2+8=0:1;0+3=3:0#3",  # n restated wrong (and one step short)
        "4;6+5=1:3;1+8=9:2;9+1=0:1;0+3=3:0#3",  # the first state is not the start
        "4;7+5=2:3;3+8=1:2;1+1=2:1;2+1=3:0#3",  # a state that is not the last result
        "4;7+5=3:3;3+8=1:2;1+1=2:1;2+1=3:0#3",  # a wrong sum, carried on consistently
        "4;7+5=2:3;2+8=0:1;0+1=1:1;1+2=3:0#3",  # a wrong counter
        "4;7+5=2:3;2+8=0:2;0+1=1:1;1+2=3:00#3",  # a counter written otherwise
        "4;7+5=2:3;2+8=0:2;0+1=1:1;1+1=2:0#2",  # a valid chain that misses the target
        "4;7+5=2:3;2+8=0:2;0+1=1:1;1+2=3:0#4",  # the answer is not where the chain ends
        "4;7+5=2:3;2+8=0:2;0+3=3:0#3",  # a step short
        "4;7+5=2:2;2+8=0:1;0+3=3:0#3",  # a step short, its counters from 2
        "4;7+5=2:3;2+8=0:2;0+1=1:1;1+1=2:0#3",  # the target written after a chain that missed
        "4;7+5=2:3;2+8=0:2;0+1=1:1;1+2=3:0;3+0=3:0#3",  # a step too many
        "4;7+5=2:3;2+8=0:2;0+1=1:1;1+12=3:0#3",  # a digit of two characters
        GOOD + "#3",  # trailing text
    ],
)
def test_every_broken_part_of_a_walk_scores_zero(response):
    assert walk_reward(response, ANSWER) == 0.0


def test_clean_demonstrations_score_one_and_slips_are_caught():
    rng = random.Random(0)
    problems = sample_problems(300, 1, ChainTaskConfig(48, 1.2), WalkProblem)
    assert {walk_reward(p.solution(0.0, rng), p.answer) for p in problems} == {1.0}
    assert {p.start for p in problems} == set(range(10)) == {p.target for p in problems}
    noisy = [walk_reward(p.solution(0.5, rng), p.answer) for p in problems]
    assert 0.0 < sum(noisy) / len(noisy) < 0.8  # a slip breaks the chain it is in


def test_walks_are_drawn_from_the_chain_tasks_length_distribution():
    config = ChainTaskConfig(48, 1.2)
    walks = [w.steps for w in sample_problems(4000, 7, config, WalkProblem)]
    chains = [c.steps for c in sample_problems(4000, 8, config, ChainProblem)]
    assert set(walks) <= set(range(1, 49)) and max(walks) > 40  # the tail reaches far
    for n in (1, 2):  # P(1) ~ 0.29 and P(2) ~ 0.12 here: the same law
        assert walks.count(n) / 4000 == pytest.approx(chains.count(n) / 4000, abs=0.03)


def test_the_config_makes_a_walk_task_scored_by_its_verifier():
    tokenizer = build_char_tokenizer(WALK_CHARACTERS)
    config = load_config(overrides={"task.name": "walk", "task.max_steps": 48, "task.alpha": 1.2})
    task = make_task(config, tokenizer)
    assert isinstance(task, WalkTask)
    group = task.next_group()
    prompt = tokenizer.decode(group.prompt_ids)
    start, target, steps = map(int, prompt[2:-1].replace(">", "x").split("x"))
    assert group.answer == WalkProblem(start, target, steps).answer
    response = WalkProblem(start, target, steps).solution()
    ids = tokenizer(response)["input_ids"]
    assert task.reward_tokens(ids, group.answer) == 1.0
    assert task.reward_tokens(ids[:-1], group.answer) == 0.0
