"""The model and the task: what is trained, on which problems, scored how."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from rollverify.config.field import at_least_one, config_field, positive
from rollverify.config.math_prompts import ANSWER_FIELDS, PROMPT_FIELDS, valid_template
from rollverify.config.reward_spec import is_reward_spec


def _named(field: str | None) -> bool:
    return field is None or bool(field.strip())


_SET_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # it names metrics: eval/<set>/avg_at_k


@dataclass
class ModelConfig:
    path: str = config_field(
        "models/tiny-qwen3-chain",
        "Folder with a transformers causal LM + tokenizer, or a hub id. Relative: to the "
        "config's folder, else the working directory, else the package's data (the default, "
        "the shipped ~0.6M-parameter Qwen3).",
    )
    revision: str | None = config_field(
        None,
        "A hub model's revision: a branch, a tag or a commit hash (pin a commit for a "
        "reproducible run). None: the hub's main. Only with a hub id in model.path.",
        _named,
        "a non-empty name",
    )
    dtype: Literal["float32", "bfloat16"] = config_field(
        "float32",
        "Compute dtype: the trainer's forward and backward, and the engines' weights; "
        "bfloat16 on GPUs. The trainer's own weights and AdamW state: train.precision.",
    )


@dataclass
class TaskConfig:
    name: Literal["chain", "chain_tool", "walk", "math", "retool", "code"] = config_field(
        "chain",
        "chain: the synthetic long-tail task; walk: the chain task whose added digits the "
        "policy chooses (a policy with entropy: experiments/stale.yaml, its model "
        "models/tiny-qwen3-walk); chain_tool: the chain task whose steps may call "
        "a calculator (multi-turn: its model is models/tiny-qwen3-chain-tool, "
        "experiments/chain-tool.yaml); math: real math (data/math) on GPUs; retool: math "
        "with a Python interpreter the policy calls (the sandbox), on the math task's data "
        "(experiments/qwen3-8b-retool.yaml); code: programs checked by unit tests in the "
        "sandbox (train_file and eval_file: code problems, humaneval by its name; "
        "experiments/qwen3-8b-code.yaml).",
    )
    max_tool_calls: int = config_field(
        8,
        "Tasks with a tool (chain_tool, retool): calls one response may make; a response "
        "that calls once more ends there, the call unanswered (verl's max turns).",
        at_least_one,
        ">= 1",
    )
    tool_timeout_s: float = config_field(
        10.0,
        "retool: wall seconds one call's code may run in the sandbox; then it is killed and "
        "the policy reads a timeout error. code: the same for one program and its tests (a "
        "timeout fails them).",
        positive,
        "> 0",
    )
    tool_memory_mb: int = config_field(
        1024,
        "retool, code: address space one call's code (one program) may take, in MiB.",
        at_least_one,
        ">= 1",
    )
    tests_field: str | None = config_field(
        None,
        "code: the field of each record that holds its unit tests (a list of asserts, or "
        "HumanEval's test code), dotted into nested records. null: the first a record has of "
        "tests, test_list, test.",
        _named,
        "a field name (dots for nested records), or null",
    )
    tests_in_prompt: int = config_field(
        1,
        "code: how many of a problem's tests its prompt shows after the text ('Your code "
        "should pass these tests:'), as MBPP's evaluations do: a test names the function and "
        "its arguments, which the text alone does not. The tests shown are still run. "
        "HumanEval's prompt is the program's start: none is shown there.",
        lambda x: x >= 0,
        ">= 0",
    )
    max_steps: int = config_field(
        32, "chain: longest chain; P(n) ~ n^-alpha over 1..max_steps.", at_least_one, ">= 1"
    )
    alpha: float = config_field(
        1.3, "chain: tail exponent; smaller = heavier tail.", positive, "> 0"
    )
    train_file: str = config_field(
        "data/math/math_train.json",
        "math: training problems (a path as for model.path), or a hub dataset "
        "hf:OWNER/NAME[:CONFIG][@SPLIT] (split: train by default).",
    )
    eval_file: str = config_field(
        "data/math/math500.json",
        "math: held-out problems (a path, or hf:OWNER/NAME[:CONFIG][@SPLIT] as train_file).",
    )
    prompt_field: str | None = config_field(
        None,
        "math: the field of each record that holds its prompt, dotted into nested records "
        "(extra_info.question): text (put into prompt_template) or chat messages [{role, "
        f"content}} ...] (used as they are). null: the first a record has of "
        f"{', '.join(PROMPT_FIELDS)}. Read in the train file and every eval file that has it.",
        _named,
        "a field name (dots for nested records), or null",
    )
    answer_field: str | None = config_field(
        None,
        "math: the field of each record that holds its reference answer, dotted into nested "
        "records (reward_model.ground_truth): a string, a number, or a list of them (any "
        "listed answer counts as correct); surrounding whitespace and $ are dropped. null: the "
        f"first a record has of {', '.join(ANSWER_FIELDS)} (of a worked solution, its "
        "'#### x' or last \\boxed{x}). `rvctl data check FILE` shows what is read and skipped.",
        _named,
        "a field name (dots for nested records), or null",
    )
    prompt_template: str = config_field(
        "boxed",
        "math: how a plain-text problem is asked. boxed: the problem, then 'Please reason step "
        "by step, and put your final answer within \\boxed{}.'; dapo: DAPO-Math's, whose "
        "response ends with a line 'Answer: x' (the reward reads either); retool: code in "
        "<tool_call> ... </tool_call>, the answer boxed (task retool); or a text of your own "
        "holding {problem}. Chat-message prompts are used as they are.",
        valid_template,
        "boxed, dapo, retool, or a text holding {problem}",
    )
    eval_files: dict[str, str] = config_field(
        {},
        "math: several held-out sets, name -> file ({aime24: data/math/aime24.json, ...}); "
        "each logged as eval/<name>/avg_at_k and pass_at_k, eval_accuracy their mean. Empty: "
        "eval_file alone, named after its file.",
        lambda sets: all(_SET_NAME.fullmatch(name) for name in sets),
        "a mapping of set names (letters, digits, _ . -) to files",
    )
    eval_sets: dict[str, int] = config_field(
        {},
        "chain: several held-out sets, name -> longest chain (difficulty) of its problems "
        "({short: 8, long: 32}). Empty: one set, 'chain', drawn as training is (max_steps).",
        lambda sets: all(_SET_NAME.fullmatch(n) and steps >= 1 for n, steps in sets.items()),
        "a mapping of set names (letters, digits, _ . -) to chain lengths >= 1",
    )
    max_prompt_tokens: int | None = config_field(
        None,
        "math: prompts longer than this many tokens (after the chat template) are skipped, in "
        "training and evaluation, with a warning (training: at the first; eval: the count), "
        "as verl's filter_overlong_prompts. null: vllm.max_model_len - rollout.max_new_tokens, "
        "what fits the engine.",
        lambda x: x is None or x >= 1,
        ">= 1 or null",
    )
    eval_size: int = config_field(
        256, "Held-out problems in each evaluation (per set).", at_least_one, ">= 1"
    )
    eval_samples: int = config_field(
        1,
        "k: samples per eval problem; avg@k = mean reward, pass@k = share of problems with a "
        "sample scored 1.",
        at_least_one,
        ">= 1",
    )
    eval_seed: int = config_field(
        12345,
        "Seed of the held-out set and of eval sampling (fixed, so "
        "every run is scored on the same problems).",
    )
    reward: str | None = config_field(
        None,
        "Your own reward instead of the task's, in training and evaluation: 'module:function' "
        "(from the config file's folder, the working directory, else the installed packages) or "
        "'path/to/file.py:function'; f(response, answer) -> float, or TRL's "
        "f(completions, **kwargs) -> list[float] (rollverify/tasks/custom_reward.py says which "
        "is which). null: the task's own (chain: exact match; math: math-verify).",
        is_reward_spec,
        "'module:function' or 'path/to/file.py:function', or null",
    )

    @property
    def reads_files(self) -> bool:
        """math, retool and code train on problem files (the chain tasks make theirs)."""
        return self.name in ("math", "retool", "code")
