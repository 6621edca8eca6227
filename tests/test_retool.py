"""The retool task's interpreter: a call's code runs in the sandbox, its output comes back as
tokens; the GPU recipe is checked here with --dry-run (its model and GPUs are not here)."""

import json
from pathlib import Path

import pytest
import torch

from rollverify.config import load_config
from rollverify.core.methods import METHODS
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.retool import CLOSE, PythonInterpreter, call_code, tool_token
from tests.cli import run_rvctl
from tests.tiny import byte_tokenizer

RECIPE = Path(__file__).parents[1] / "experiments" / "qwen3-8b-retool.yaml"
# every partial method; make test trains partial and rollverify, the rest are the matrix tier
# (docs/testing.md; make test trains every method on the chain task, tests/test_train.py)
PARTIAL = [
    name if name in ("partial", "rollverify") else pytest.param(name, marks=pytest.mark.matrix)
    for name, method in METHODS.items()
    if method.partial
]
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


@pytest.fixture(scope="module")
def tokenizer():
    return byte_tokenizer(TOOL_TOKENS)


def called(tokenizer, text: str) -> Trajectory:
    """A trajectory whose response is `text`, ending at a call's closing token."""
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
    trajectory = Trajectory(torch.tensor([0]), 0, 0)
    trajectory.extend(ids, torch.zeros(len(ids)), version=0)
    return trajectory


def test_the_code_of_the_last_call_is_run():
    assert call_code("a <tool_call>x = 1</tool_call> b <tool_call>\nprint(2)\n</tool_call>") == (
        "print(2)"
    )
    assert call_code("<tool_call>```python\nprint(3)\n```</tool_call>") == "print(3)"
    assert call_code("no call </tool_call>") is None


def test_a_call_runs_in_the_sandbox_and_its_output_comes_back_as_tokens(tokenizer):
    interpreter = PythonInterpreter(tokenizer, timeout_s=5, memory_mb=256)
    assert interpreter.closing_token_id == tokenizer.convert_tokens_to_ids(CLOSE)
    text = "First 6 x 7: <tool_call>\nprint(6 * 7)\n</tool_call>"
    output = interpreter.run(called(tokenizer, text))
    assert tokenizer.decode(output.token_ids) == "<tool_response>\n42\n</tool_response>\n"
    assert not output.error and not output.timed_out
    # the output's ids are the tokenizer's own for that text: appended, nothing re-tokenized
    assert output.token_ids == tokenizer("<tool_response>\n42\n</tool_response>\n")["input_ids"]

    failed = interpreter.run(called(tokenizer, "<tool_call>1 / 0</tool_call>"))
    assert failed.error and "ZeroDivisionError" in tokenizer.decode(failed.token_ids)
    # (what the code cannot reach, the network and the user's files: tests/test_sandbox.py)


def test_a_call_that_runs_too_long_is_cut_and_told(tokenizer):
    interpreter = PythonInterpreter(tokenizer, timeout_s=1, memory_mb=256)
    output = interpreter.run(called(tokenizer, "<tool_call>while True: pass</tool_call>"))
    assert output.timed_out and "timed out after 1 s" in tokenizer.decode(output.token_ids)


def test_a_tokenizer_without_a_tool_call_token_is_refused_naming_the_field():
    plain = byte_tokenizer([])
    with pytest.raises(ValueError, match="task.name: retool needs a tokenizer with </tool_call>"):
        tool_token(plain, CLOSE)


def test_the_gpu_recipe_loads_and_its_dry_run_names_what_is_missing_here(
    tmp_path, monkeypatch, capsys
):
    config = load_config(RECIPE)
    assert config.task.name == "retool" and config.task.prompt_template == "retool"
    assert config.task.max_tool_calls >= 1 and config.model.path.startswith("Qwen/")
    args = ["train", "--dry-run", "-c", str(RECIPE), "--output", str(tmp_path / "runs")]
    result = run_rvctl(args, monkeypatch, capsys)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert any("train.sharding: fsdp needs GPUs" in line for line in errors), errors
    assert not any(line.startswith("error: task.") for line in errors), "its data is shipped"
    assert not (tmp_path / "runs").exists()


def test_the_task_asks_for_tool_calls_on_math_data_and_refuses_a_model_without_them(tokenizer):
    from rollverify.training.parts import make_task

    settings = {"task.name": "retool", "task.prompt_template": "retool"}
    config = load_config(overrides=settings | {"task.eval_file": "data/math/aime24.json"})
    task = make_task(config, tokenizer)
    prompt = tokenizer.decode(task.next_group().prompt_ids)
    assert "between <tool_call> and </tool_call>" in prompt and "\\boxed{}" in prompt
    assert task.tool_runner().closing_token_id == tokenizer.convert_tokens_to_ids(CLOSE)
    assert task.reward("so the answer is \\boxed{42}", "42") == 1.0  # math-verify's
    with pytest.raises(ValueError, match="task.name: retool needs a tokenizer"):
        make_task(config, byte_tokenizer([]))


# -- the retool task in training (a random model: plumbing, not learning) ---------------------


@pytest.fixture(scope="module")
def retool_model(tmp_path_factory) -> Path:
    """A random byte model that opens and closes calls often and ends at varied lengths: its
    calls' code is random bytes (the sandbox runs it and answers with the error), its answers
    are never right (a reward of 0)."""
    from tests.tiny import byte_model

    odds = {"<eos>": 0.04, "<tool_call>": 0.05, "</tool_call>": 0.05}
    return byte_model(tmp_path_factory.mktemp("retool-model"), TOOL_TOKENS, odds)


def retool_config(tmp_path: Path, method: str, model: Path):
    from tests.runs import tiny

    problems = tmp_path / "sums.json"  # short: the byte model's context is 512 bytes
    sums = [{"problem": f"{i}+{i}?", "answer": str(2 * i)} for i in range(4)]
    problems.write_text(json.dumps(sums))
    settings = {"task.name": "retool", "task.prompt_template": "retool", "model.path": str(model)}
    settings |= {"task.train_file": str(problems), "task.eval_file": str(problems)}
    settings |= {"task.eval_size": 2, "rollout.max_new_tokens": 48}
    settings |= {"task.max_tool_calls": 2, "task.tool_timeout_s": 5, "task.tool_memory_mb": 256}
    return tiny(tmp_path, method, **settings | {"train.steps": 2})


@pytest.mark.parametrize("method", PARTIAL)
def test_every_partial_method_trains_the_retool_task(tmp_path, retool_model, method):
    from rollverify.cost.ledger import CostLedger
    from rollverify.training.run import train
    from tests.runs import history

    summary = train(retool_config(tmp_path, method, retool_model))
    metrics = history(summary)
    assert sorted(metrics["reward_mean"]) == [1, 2]
    assert set(metrics["reward_mean"].values()) == {0.0}, "random bytes are no answer"
    assert sum(metrics["tool_calls"].values()) > 0, "the model calls"
    assert sum(metrics["tool_errors"].values()) > 0, "its random code fails in the sandbox"
    assert metrics["resumed"][2] > 0, "step 1 paused responses that step 2 trains"
    ledger = CostLedger.from_dict(json.loads((Path(summary.run_dir) / "ledger.json").read_text()))
    assert ledger.tool_cpu_seconds > 0, "the sandboxed programs' CPU time is counted"
    # the engine waits for the sandbox at times: the tool phase, within the run's wall time
    assert 0 < ledger.device_seconds["tool"] < ledger.wall_seconds


FAILING_SANDBOX = """
import json, resource
from rollverify.tasks.retool import PythonInterpreter
from tests.test_retool import TOOL_TOKENS, called
from tests.tiny import byte_tokenizer

tokenizer = byte_tokenizer(TOOL_TOKENS)
interpreter = PythonInterpreter(tokenizer, timeout_s=5, memory_mb=256)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))  # a disk full for a larger call
outputs = []
for code in ("print(6 * 7)  #" + "#" * (1 << 17), "print(6 * 7)"):
    output = interpreter.run(called(tokenizer, f"<tool_call>{code}</tool_call>"))
    outputs.append([tokenizer.decode(output.token_ids), output.error, output.broken])
print(json.dumps(outputs))
"""


def test_a_call_the_sandbox_fails_to_run_is_a_tool_error_not_the_end_of_the_run():
    import subprocess
    import sys

    root = Path(__file__).parents[1]
    done = subprocess.run(
        [sys.executable, "-c", FAILING_SANDBOX], cwd=root, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    failed, worked = json.loads(done.stdout.splitlines()[-1])
    assert failed == [
        "<tool_response>\nerror: the sandbox could not run the code (OSError)\n</tool_response>\n",
        True,
        True,
    ]
    assert worked == ["<tool_response>\n42\n</tool_response>\n", False, False]
