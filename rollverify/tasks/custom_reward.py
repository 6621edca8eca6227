"""A reward of your own: `task.reward: "package.module:function"` replaces the task's reward
wherever the task's reward is used (training rewards and evaluation); the prompts, the eval
sets and everything else stay the task's.

Where the function comes from (`task.reward`, one string):

    my_rewards:score                 a module: from the config file's folder, else the
                                     working directory, else the installed packages (a
                                     module found in those folders comes first, and is kept
                                     as the path of its file)
    pkg.rewards:score                a module of a package (folders with __init__.py)
    rewards/score.py:score           a Python file (relative: to the config's folder, then
                                     the working directory),
                                     imported as the module its package folders make it
    my_rewards:Scorer.score          an attribute path after the colon

Only that module is imported (with whatever it imports itself); the folder it is imported from
is on `sys.path` while it is imported, and taken off again. Nothing else of that folder runs.
`resolve_reward` (rollverify/config/reward_spec.py, for the config's loading) finds a module or
file in the config file's folder too, and keeps it as the absolute path of its file.

Which signature (the rule, read from `inspect.signature`):

    TRL's    f(completions: list[str], **kwargs) -> list[float]   when its first positional
             parameter is named `completions` or `prompts`, or it has a keyword-only
             `completions`, or it takes nothing but **kwargs. It is called once per response,
             with `completions=[response]` and `answer=[answer]` (where it takes `answer` or
             **kwargs), and must return a list of one number. TRL's other arguments (`prompts`,
             `completion_ids`, `trainer_state`, ...) are not passed: a function that requires
             one is refused when the task is made.
    plain    f(response: str, answer: str) -> float                every other callable that
             takes two positional arguments.

`response` is the decoded completion (special tokens skipped); `answer` is the problem's
reference answer as the task holds it (chain: a digit; math: a string, or a tuple of the
accepted ones where a record lists several). A return that is not a finite number (nan, inf, None,
a string, a list of the wrong length) stops the run with one line naming the function, the
value and the response (`RewardError`, a ValueError: rvctl exits 2). An exception raised by
the function itself propagates with a note naming it.

When it is checked: the format when the config is loaded (the field's rule in
config/sections/model_task.py); the module, the attribute and the signature when the task is made
(`with_reward`, from training/parts.py `make_task`), before the first rollout; each problem is
one line, `task.reward: ...`, naming the function (a ConfigError).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollverify.config.errors import ConfigError
from rollverify.config.reward_spec import FIELD, is_path

if TYPE_CHECKING:  # (a Task holds tensors: torch is imported where tasks are made)
    from rollverify.tasks.base import Task

TRL_FIRST = ("completions", "prompts")  # a first parameter so named: TRL's signature


class RewardError(ValueError):
    """The custom reward returned something that is not a finite number."""


# -- when the task is made: the function ----------------------------------------------------


class RewardFunction:
    """The user's function, called as `reward(response, answer) -> float` whatever its style."""

    def __init__(self, spec: str, func: Callable[..., Any]) -> None:
        self.spec, self.func = spec, func
        self.trl_style, self.kwargs_names = _style(spec, func)

    def __call__(self, response: str, answer: Any) -> float:
        try:
            if self.trl_style:
                given = {"completions": [response], "answer": [answer]}
                out = self.func(**{k: v for k, v in given.items() if k in self.kwargs_names})
            else:
                out = self.func(response, answer)
        except Exception as error:
            error.add_note(f"(raised by {FIELD} {self.spec})")
            raise
        value = out
        if self.trl_style:
            if isinstance(out, (str, bytes)) or not hasattr(out, "__len__") or len(out) != 1:
                self._refuse(out, response, answer, "a list of one number per completion")
            value = out[0]
        number = _number(value)
        if number is None or not math.isfinite(number):
            self._refuse(out, response, answer, "a finite number")
        return number

    def _refuse(self, out: Any, response: str, answer: Any, wanted: str) -> None:
        raise RewardError(
            f"{FIELD} {self.spec} returned {_show(out)} for the response {_show(response)} "
            f"(answer {_show(answer)}); it must return {wanted}"
        )


def load_reward(spec: str) -> RewardFunction:
    """Import `spec` and check its signature; ConfigError (one line naming it) if it cannot."""
    target, _, attr = spec.rpartition(":")
    try:
        module = _import(target)
    except _NotImported as refused:
        raise ConfigError([f"{FIELD}: cannot import {spec!r} ({refused})"]) from None
    except Exception as error:
        raise ConfigError([f"{FIELD}: cannot import {spec!r} ({_describe(error)})"]) from None
    func: Any = module
    for part in attr.split("."):
        try:
            func = getattr(func, part)
        except AttributeError as error:
            raise ConfigError(
                [f"{FIELD}: cannot import {spec!r} (AttributeError: {_one_line(error)})"]
            ) from None
    if not callable(func):
        raise ConfigError(
            [f"{FIELD}: {spec!r} is a {type(func).__name__}, not a function; name a function"]
        )
    return RewardFunction(spec, func)


def _style(spec: str, func: Callable[..., Any]) -> tuple[bool, set[str]]:
    """(TRL style?, the keyword arguments it takes of those passed); see the module's rule."""
    if inspect.iscoroutinefunction(func):
        raise ConfigError([f"{FIELD}: {spec!r} is async; give a plain function"])
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        raise ConfigError(
            [f"{FIELD}: {spec!r} has no signature to read; wrap it in a def"]
        ) from None
    params = list(signature.parameters.values())
    kinds = inspect.Parameter
    positional = [
        p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    ]
    keyword_only = {p.name for p in params if p.kind is kinds.KEYWORD_ONLY}
    var_keyword = any(p.kind is kinds.VAR_KEYWORD for p in params)
    var_positional = any(p.kind is kinds.VAR_POSITIONAL for p in params)
    trl = (
        bool(positional and positional[0].name in TRL_FIRST)
        or "completions" in keyword_only
        or (var_keyword and not positional and not var_positional)
    )
    shown = f"{spec!r} {signature}"
    if trl:
        names = {p.name for p in params if p.kind is not kinds.POSITIONAL_ONLY}
        passed = {"completions", "answer"} if var_keyword else {"completions", "answer"} & names
        try:
            signature.bind(**{name: [] for name in passed})
        except TypeError as error:
            raise ConfigError(
                [
                    f"{FIELD}: {shown} is TRL-style, but rollverify passes it only "
                    f"completions= and answer= ({error}); give the others defaults"
                ]
            ) from None
        return True, passed
    try:
        signature.bind("", "")
    except TypeError:
        raise ConfigError(
            [
                f"{FIELD}: {shown} takes neither (response, answer) -> float nor TRL's "
                "(completions, **kwargs) -> list[float]"
            ]
        ) from None
    return False, set()


class _NotImported(Exception):
    """A module that cannot be imported for a reason of ours (the text says why)."""


def _import(target: str):
    importlib.invalidate_caches()  # a module written a moment ago is seen
    if not is_path(target):
        with _on_path(Path.cwd(), first=False):  # installed packages win over the folder's
            return importlib.import_module(target)
    path = Path(target)
    if not path.is_absolute():
        path = Path.cwd() / path
    if not path.is_file():
        raise _NotImported(f"no file {path}")
    path = path.resolve()
    root, name = _package_root(path)
    already = sys.modules.get(name)
    with _on_path(root, first=True):
        module = importlib.import_module(name)
    loaded = getattr(module, "__file__", None)
    if loaded is None or Path(loaded).resolve() != path:
        where = loaded or "a built-in"
        raise _NotImported(
            f"another module named {name!r} is {'already ' if already else ''}imported, "
            f"from {where}; rename the file"
        )
    return module


def _package_root(path: Path) -> tuple[Path, str]:
    """The folder to import `path` from and its dotted name (its packages: __init__.py)."""
    if path.name == "__init__.py":  # a package's own file: the package
        parts, folder = [path.parent.name], path.parent.parent
    else:
        parts, folder = [path.stem], path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return folder, ".".join(parts)


@contextmanager
def _on_path(folder: Path, first: bool) -> Iterator[None]:
    """`folder` on sys.path for the import only (unless it is there already)."""
    entry = str(folder)
    if entry in sys.path:
        yield
        return
    if first:
        sys.path.insert(0, entry)
    else:
        sys.path.append(entry)
    try:
        yield
    finally:
        if entry in sys.path:
            sys.path.remove(entry)


def _describe(error: BaseException) -> str:
    """`Type: message`, and where in the user's code for an error its module raised."""
    text = f"{type(error).__name__}: {_one_line(error)}"
    if isinstance(error, (ImportError, SyntaxError)):
        return text
    frames = traceback.extract_tb(error.__traceback__)
    return f"{text}, at {frames[-1].filename}:{frames[-1].lineno}" if frames else text


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- the task with it -----------------------------------------------------------------------


class CustomRewardTask:
    """`task` with its reward replaced (rollverify.tasks.base.Task); all else is the task's."""

    reward_workers = 1  # your function is called one at a time, whatever the task's own does

    def __init__(self, task: Task, reward: RewardFunction) -> None:
        self.task, self.custom_reward = task, reward

    def reward(self, response: str, answer: Any) -> float:
        return self.custom_reward(response, answer)

    def reward_tokens(self, token_ids: list[int], answer: Any) -> float:
        """As the tasks do: the response decoded without special tokens."""
        text = self.task.tokenizer.decode(token_ids, skip_special_tokens=True)
        return self.reward(text, answer)

    def __getattr__(self, name: str) -> Any:  # next_group, eval_sets, state_dict, ...
        if name in ("task", "custom_reward"):  # not set yet (copy, pickle)
            raise AttributeError(name)
        return getattr(self.task, name)


def with_reward(task: Task, spec: str | None) -> Task:
    """`task` itself for `spec` None, else with the reward `spec` names (checked now)."""
    if spec is None:
        return task
    return CustomRewardTask(task, load_reward(spec))
