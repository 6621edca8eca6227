"""Real math (data/math, or a file of your own in any format rollverify/tasks/data/records.py reads)
as a training task, for GPU configs.

A plain problem goes into the prompt template (task.prompt_template: the boxed-answer
instruction by default, or DAPO-Math's "Answer:" line); a prompt that is chat messages already
(verl/DAPO Parquet) is used as it is. Either goes through the model's chat template. The reward
is math-verify equivalence with the reference, any of several
(rollverify.tasks.rewards.math_answer).
"""

from __future__ import annotations

import random
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from rollverify.config.math_prompts import INSTRUCTION, render_prompt
from rollverify.infra.paths import is_hub_data
from rollverify.rollout.schedules import PromptGroup
from rollverify.tasks.base import EvalProblem
from rollverify.tasks.data.hub_data import parse
from rollverify.tasks.data.math_problems import MathProblem, load_math_set
from rollverify.tasks.rewards.math_answer import math_answer_reward

__all__ = ["INSTRUCTION", "MathTask", "ProblemFiles"]


@dataclass(frozen=True)
class ProblemFiles:
    """What a task over problem files takes (math, and the code and retool tasks built on it):
    the training file and its draws' seed; the eval sets (eval_files by name, else eval_file),
    eval_size problems each, drawn with eval_seed; the field of each record's prompt (None:
    the format's own); the prompt template; prompts over max_prompt_tokens skipped."""

    train_file: str
    eval_file: str
    seed: int
    eval_size: int
    eval_seed: int
    eval_files: dict[str, str] | None = None
    prompt_field: str | None = None
    prompt_template: str = "boxed"
    max_prompt_tokens: int | None = None


class MathTask:
    def __init__(self, tokenizer, files: ProblemFiles, answer_field: str | None = None) -> None:
        render_prompt(files.prompt_template, "")  # a bad template fails here, naming the field
        self.tokenizer, self.prompt_template = tokenizer, files.prompt_template
        self.prompt_field, self.answer_field = files.prompt_field, answer_field
        self.train = self._problems("train", files.train_file)
        self.eval_files = files.eval_files or {set_name(files.eval_file): files.eval_file}
        self.eval_sets_problems = {
            name: self._problems(f"eval/{name}", path) for name, path in self.eval_files.items()
        }
        self.eval = next(iter(self.eval_sets_problems.values()))
        self.seed, self.eval_size, self.eval_seed = files.seed, files.eval_size, files.eval_seed
        self.max_prompt_tokens = files.max_prompt_tokens
        self.next_group_id = 0
        self.next_problem = 0  # drawn so far, the skipped ones included
        self.skipped = 0  # training prompts over max_prompt_tokens

    def _problems(self, role: str, path: str) -> list[MathProblem]:
        """The usable problems of the file for `role` ("train", "eval/<set>"). Each file
        refuses, in one line naming it and its most common reason, if none of its records is
        usable. Eval files use the fields where they have them, else the defaults (the shipped
        sets beside a training file of your own)."""
        fields = {"prompt_field": self.prompt_field, "answer_field": self.answer_field}
        read = load_math_set(path, **fields, defaults_if_absent=role != "train")
        return read.require_usable().problems

    def messages(self, problem: MathProblem) -> list[dict[str, str]]:
        """The chat messages of a problem: its own, or one user turn of the prompt template."""
        if problem.messages:
            return [dict(message) for message in problem.messages]
        return [{"role": "user", "content": render_prompt(self.prompt_template, problem.problem)}]

    def _ids(self, problem: MathProblem) -> torch.Tensor:
        messages = self.messages(problem)
        if getattr(self.tokenizer, "chat_template", None):
            # return_dict=True on every transformers version: 5.x returns a BatchEncoding (not
            # a dict) by default, which a dict check missed and torch.tensor cannot read.
            ids = self.tokenizer.apply_chat_template(
                messages,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )["input_ids"]
        else:  # no chat template: the messages' text, one blank line apart
            ids = self.tokenizer("\n\n".join(m["content"] for m in messages))["input_ids"]
        return torch.tensor(ids, dtype=torch.long)

    def _problem(self, index: int) -> MathProblem:
        # Epoch e visits the training set in its own seeded order: resumable from the index alone.
        epoch, position = divmod(index, len(self.train))
        order = list(range(len(self.train)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return self.train[order[position]]

    def next_group(self) -> PromptGroup:
        """The next training problem whose prompt fits max_prompt_tokens; the longer ones are
        skipped (counted, and warned of at the first)."""
        for _ in range(len(self.train)):
            problem = self._problem(self.next_problem)
            self.next_problem += 1
            ids = self._ids(problem)
            if self._fits(ids):
                group = PromptGroup(self.next_group_id, ids, problem.answer)
                self.next_group_id += 1
                return group
            self.skipped += 1
            if self.skipped == 1:
                warnings.warn(
                    f"task.max_prompt_tokens: skipping training prompts longer than "
                    f"{self.max_prompt_tokens} tokens (the first: {len(ids)})",
                    stacklevel=2,
                )
        raise ValueError(
            f"task.max_prompt_tokens: no training prompt of {len(self.train)} fits in "
            f"{self.max_prompt_tokens} tokens; raise it (or vllm.max_model_len)"
        )

    def _fits(self, ids: torch.Tensor) -> bool:
        return self.max_prompt_tokens is None or len(ids) <= self.max_prompt_tokens

    def _eval_set(self, name: str, problems: list[MathProblem]) -> list[EvalProblem]:
        chosen = random.Random(self.eval_seed).sample(problems, min(self.eval_size, len(problems)))
        encoded = [EvalProblem(self._ids(p), p.answer) for p in chosen]
        kept = [p for p in encoded if self._fits(p.prompt_ids)]
        if not kept:
            raise ValueError(
                f"task.max_prompt_tokens: no prompt of eval set {name} fits in "
                f"{self.max_prompt_tokens} tokens; raise it (or vllm.max_model_len)"
            )
        if len(kept) < len(encoded):
            warnings.warn(
                f"task.max_prompt_tokens: eval set {name} skips {len(encoded) - len(kept)} of "
                f"{len(encoded)} prompts longer than {self.max_prompt_tokens} tokens",
                stacklevel=2,
            )
        return kept

    def eval_problems(self) -> list[EvalProblem]:
        return self._eval_set(next(iter(self.eval_files)), self.eval)

    def eval_sets(self) -> dict[str, list[EvalProblem]]:
        """Every held-out set by name (task.eval_files; else eval_file, named after its file),
        each eval_size problems drawn with the eval seed."""
        return {name: self._eval_set(name, p) for name, p in self.eval_sets_problems.items()}

    def reward(self, response: str, answer: str | tuple[str, ...]) -> float:
        return math_answer_reward(response, answer)

    def reward_tokens(self, token_ids: list[int], answer: str | tuple[str, ...]) -> float:
        return self.reward(self.tokenizer.decode(token_ids, skip_special_tokens=True), answer)

    def state_dict(self) -> dict:
        return {
            "next_group_id": self.next_group_id,
            "next_problem": self.next_problem,
            "skipped": self.skipped,
        }

    def load_state_dict(self, state: dict) -> None:
        self.next_group_id = state["next_group_id"]
        # (a checkpoint from before prompts were skipped: one problem per group)
        self.next_problem = state.get("next_problem", self.next_group_id)
        self.skipped = state.get("skipped", 0)


def set_name(eval_file: str) -> str:
    """The name of a lone eval file's set in metric names (eval/<set>/...): its file name
    without the extension, or a hub dataset's name (hf:openai/gsm8k:main@test: gsm8k), in the
    characters MLflow takes."""
    hub = is_hub_data(eval_file)
    name = parse(eval_file).repo.split("/")[-1] if hub else Path(eval_file).stem
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)
