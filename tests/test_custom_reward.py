"""task.reward: a reward of your own (rollverify/tasks/custom_reward.py) replaces the task's in
training and in evaluation, in either signature; a function that cannot be imported, or that
returns something other than a finite number, is one line naming it (exit 2 in the CLI)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rollverify.config import ConfigError, load_config
from rollverify.config.reward_spec import is_reward_spec, resolve_reward
from rollverify.tasks.custom_reward import (
    CustomRewardTask,
    RewardError,
    load_reward,
    with_reward,
)
from rollverify.training.run import train
from tests.cli import run_rvctl
from tests.runs import history, tiny, tiny_file

ROOT = Path(__file__).resolve().parents[1]

PLAIN = """
def score(response, answer):
    # 0.25 only when called as the task's reward is: the decoded text and a chain answer
    return 0.25 if isinstance(response, str) and answer.isdigit() else 0.0
"""

TRL = """
def score(completions, **kwargs):
    answers = kwargs["answer"]
    ok = len(completions) == len(answers) == 1 and answers[0].isdigit()
    return [0.75 if ok and isinstance(c, str) else 0.0 for c in completions]
"""


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


@pytest.fixture(autouse=True)
def forget_written_modules(tmp_path):
    """Modules a test wrote and imported leave sys.modules with the test."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        file = getattr(sys.modules[name], "__file__", None) or ""
        if file.startswith(str(tmp_path)):
            del sys.modules[name]


class StubTokenizer:
    def decode(self, ids, skip_special_tokens=False):
        assert skip_special_tokens
        return "".join(chr(i) for i in ids)


class StubTask:
    tokenizer = StubTokenizer()

    def reward(self, response, answer):
        return 1.0

    def next_group(self):
        return "group"

    def eval_sets(self):
        return {"chain": []}

    def state_dict(self):
        return {"at": 3}


# -- end to end: what gets logged is the custom reward ------------------------------------


def test_a_plain_reward_replaces_the_task_reward_in_training_and_evaluation(tmp_path):
    path = write(tmp_path, "plain_reward_e2e", PLAIN)
    config = tiny(
        tmp_path / "runs", "rollverify", **{"train.steps": 2, "task.reward": f"{path}:score"}
    )
    metrics = history(train(config))
    assert metrics["reward_mean"] == {1: 0.25, 2: 0.25}
    assert set(metrics["eval_accuracy"].values()) == {0.25}, "evaluation scores with it too"


def test_a_trl_style_reward_by_module_name_trains_end_to_end(tmp_path, monkeypatch):
    write(tmp_path, "trl_reward_e2e", TRL)
    monkeypatch.chdir(tmp_path)  # a module name: found in the working directory
    config = tiny(
        tmp_path / "runs", "grpo", **{"train.steps": 2, "task.reward": "trl_reward_e2e:score"}
    )
    metrics = history(train(config))
    assert metrics["reward_mean"] == {1: 0.75, 2: 0.75}
    assert set(metrics["eval_accuracy"].values()) == {0.75}


# -- the two signatures --------------------------------------------------------------------

SIGNATURES = {
    "def f(response, answer): return 0.5": False,
    "def f(text, ref, extra=1): return 0.5": False,
    "def f(*args): return 0.5": False,
    "def f(response, answer, **kwargs): return 0.5": False,
    "def f(completions, **kwargs): return [0.5]": True,
    "def f(completions, answer): return [0.5]": True,
    "def f(prompts=None, completions=None, **kwargs): return [0.5]": True,
    "def f(*, completions, answer): return [0.5]": True,
    "def f(**kwargs): return [0.5]": True,
}


@pytest.mark.parametrize("source", SIGNATURES)
def test_the_signature_says_which_style_and_both_give_one_number(tmp_path, source):
    name = f"sig{list(SIGNATURES).index(source)}"
    write(tmp_path, name, source)
    reward = load_reward(f"{tmp_path / name}.py:f")
    assert reward.trl_style == SIGNATURES[source]
    assert reward("4;1+1=2:0#2", "2") == 0.5


def test_the_task_keeps_all_but_its_reward():
    task = CustomRewardTask(StubTask(), load_reward("operator:eq"))
    assert (task.next_group(), task.eval_sets(), task.state_dict()) == (
        "group",
        {"chain": []},
        {"at": 3},
    )
    assert with_reward(task.task, None) is task.task, "null: the task's own reward"


def test_reward_tokens_scores_the_decoded_response_with_the_custom_reward(tmp_path):
    path = write(tmp_path, "tokens_reward", "def f(response, answer): return len(response) / 4")
    task = with_reward(StubTask(), f"{path}:f")
    assert task.reward("ab", "1") == 0.5
    assert task.reward_tokens([ord("a"), ord("b"), ord("c")], "1") == 0.75


def test_a_module_name_is_found_in_the_working_directory_for_the_import_only(tmp_path, monkeypatch):
    write(tmp_path, "cwd_reward", "def f(response, answer): return 0.5")
    monkeypatch.chdir(tmp_path)
    here = {"", ".", str(tmp_path)}
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in here])  # as `rvctl` has it
    before = list(sys.path)
    assert load_reward("cwd_reward:f")("x", "1") == 0.5
    assert sys.path == before, "the folder is off sys.path again"


# -- problems: one line, naming the function -----------------------------------------------

IMPORT_PROBLEMS = {
    "no module": ("no_such_reward_module:score", "", "ModuleNotFoundError"),
    "no attribute": ("{m}:nope", "def score(r, a): return 1.0", "AttributeError"),
    "not callable": ("{m}:score", "score = 3", "is a int, not a function"),
    "one argument": ("{m}:score", "def score(r): return 1.0", "takes neither"),
    "three arguments": ("{m}:score", "def score(r, a, b): return 1.0", "takes neither"),
    "TRL wanting prompts": (
        "{m}:score",
        "def score(prompts, completions, **kw): return [1.0]",
        "TRL-style, but rollverify passes it only completions= and answer=",
    ),
    "async": ("{m}:score", "async def score(r, a): return 1.0", "is async"),
    "syntax error": ("{m}:score", "def score(r, a) return 1.0", "SyntaxError"),
    "raises on import": ("{m}:score", "import os\nraise RuntimeError('boom')", "boom, at "),
    "no file": ("{d}/missing.py:score", None, "no file"),
}


@pytest.mark.parametrize("case", IMPORT_PROBLEMS)
def test_a_function_that_cannot_be_used_is_one_line_naming_it(tmp_path, case):
    spec, source, expected = IMPORT_PROBLEMS[case]
    module = f"bad_{case.replace(' ', '_')}"
    if source:
        write(tmp_path, module, source)
    spec = spec.format(m=tmp_path / f"{module}.py", d=tmp_path)
    with pytest.raises(ConfigError) as error:
        with_reward(StubTask(), spec)
    [line] = error.value.problems
    assert line.startswith("task.reward: ") and spec in line and expected in line, line
    assert "\n" not in str(error.value)


BAD_RETURNS = {
    "def f(r, a): return float('nan')": "returned nan for the response 'x' (answer '1')",
    "def f(r, a): return float('inf')": "returned inf",
    "def f(r, a): return None": "returned None",
    "def f(r, a): return '0.5'": "returned '0.5'",
    "def f(completions, **kw): return 0.5": "a list of one number",
    "def f(completions, **kw): return []": "returned []",
    "def f(completions, **kw): return [None]": "returned [None]",
    "def f(completions, **kw): return [float('nan')]": "returned [nan]",
}


@pytest.mark.parametrize("source", BAD_RETURNS)
def test_a_return_that_is_not_a_finite_number_names_the_function(tmp_path, source):
    name = f"ret{list(BAD_RETURNS).index(source)}"
    spec = f"{write(tmp_path, name, source)}:f"
    task = with_reward(StubTask(), spec)
    with pytest.raises(RewardError) as error:
        task.reward("x", "1")
    message = str(error.value)
    assert message.startswith(f"task.reward {spec} returned ") and "\n" not in message
    assert BAD_RETURNS[source] in message


def test_an_exception_of_the_function_itself_carries_its_name(tmp_path):
    spec = f"{write(tmp_path, 'raising', 'def f(r, a): return 1 / 0')}:f"
    with pytest.raises(ZeroDivisionError) as error:
        with_reward(StubTask(), spec).reward("x", "1")
    assert f"(raised by task.reward {spec})" in error.value.__notes__


# -- when the config is loaded ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["pkg.mod:score", "mod:Scorer.score", "rewards/score.py:f", "/abs/score.py:f", None],
)
def test_the_format_is_checked_when_the_config_loads(value):
    assert is_reward_spec(value)


def test_the_config_finds_the_module_next_to_it_and_names_a_missing_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_config(overrides={"task.reward": "math:sqrt"}).task.reward == "math:sqrt"
    with pytest.raises(ConfigError, match="task.reward: no module 'nowhere_mod'"):
        load_config(overrides={"task.reward": "nowhere_mod:score"})
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_score.py").write_text("def score(response, answer):\n    return 1.0\n")
    (project / "run.yaml").write_text("task:\n  reward: my_score:score\n")
    resolved = load_config(project / "run.yaml").task.reward
    assert resolved == f"{(project / 'my_score.py').resolve()}:score"


@pytest.mark.parametrize("value", ["score", "mod:", ":f", "mod:f-1", "my-mod:f", "a..b:f", ".py:f"])
def test_a_malformed_spec_is_a_config_error(value):
    with pytest.raises(ConfigError) as error:
        load_config(overrides={"task.reward": value})
    assert error.value.problems == [
        f"task.reward: must be 'module:function' or 'path/to/file.py:function', or null, "
        f"got {value!r}"
    ]


def test_resolve_reward_finds_the_module_in_the_config_folder(tmp_path, monkeypatch):
    folder = tmp_path / "configs"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "__init__.py").write_text("")
    write(folder / "pkg", "near_reward", "from . import helper\ndef f(r, a): return helper.V")
    write(folder / "pkg", "helper", "V = 0.5")
    monkeypatch.chdir(tmp_path)  # not the config's folder
    problems: list[str] = []
    resolved = resolve_reward("pkg.near_reward:f", folder, problems)
    assert problems == [] and resolved == f"{(folder / 'pkg' / 'near_reward.py').resolve()}:f"
    reward = load_reward(resolved)  # the absolute file, imported as pkg.near_reward
    assert reward("x", "1") == 0.5
    assert resolve_reward("pkg/helper.py:V", folder, problems).startswith(str(folder.resolve()))
    assert resolve_reward("math:cos", folder, problems) == "math:cos", "installed: as given"
    resolve_reward("no_such_module_anywhere:f", folder, problems)
    resolve_reward("gone.py:f", folder, problems)
    assert len(problems) == 2
    assert problems[0].startswith("task.reward: no module 'no_such_module_anywhere' for ")
    assert problems[1].startswith(f"task.reward: no file gone.py in {folder.resolve()}")


# -- through the CLI: exit 2, one line, no traceback ----------------------------------------


def cli_train(tmp_path: Path, reward: str, monkeypatch, capsys) -> subprocess.CompletedProcess:
    path = tiny_file(tmp_path / "config.yaml", **{"task.reward": reward})
    output = tmp_path / "runs"
    monkeypatch.chdir(tmp_path)  # not the repository: a module written here is found by its name
    arguments = ["train", "--config", str(path), "--steps", "1", "--method", "grpo"]
    return run_rvctl([*arguments, "--output", str(output)], monkeypatch, capsys)


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    """What the CLI said was wrong (stderr also holds the progress line of the run)."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return [line for line in done.stderr.splitlines() if line.startswith(("error", "hint"))]


@pytest.mark.slow  # a 1-step run
def test_the_cli_names_a_reward_it_cannot_import_or_that_returns_nan(tmp_path, monkeypatch, capsys):
    # A module found nowhere: refused as the config loads.
    assert error_lines(cli_train(tmp_path, "no_such_reward_module:score", monkeypatch, capsys)) == [
        "error: task.reward: no module 'no_such_reward_module' for "
        f"'no_such_reward_module:score' in {tmp_path} or the installed packages; fix the name, "
        "or give the file: path/to/file.py:function"
    ]
    # A module that fails as it is imported: refused before anything starts.
    write(tmp_path, "broken_reward_cli", "1 / 0\ndef score(response, answer): return 1.0")
    [line] = error_lines(cli_train(tmp_path, "broken_reward_cli:score", monkeypatch, capsys))
    assert line.startswith("error: task.reward: cannot import ")
    assert "broken_reward_cli.py:score' (ZeroDivisionError: division by zero, at " in line
    write(tmp_path, "nan_reward_cli", "def score(response, answer): return float('nan')")
    [line] = error_lines(cli_train(tmp_path, "nan_reward_cli:score", monkeypatch, capsys))
    assert line.startswith("error: task.reward ") and "nan_reward_cli.py:score returned nan" in line
