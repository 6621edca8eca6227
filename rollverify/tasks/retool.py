"""The retool task: math with a Python interpreter (ReTool's setting, the paper's Table 8).

The policy reasons in text and may run code: it writes the code between `<tool_call>` and
`</tool_call>` (Qwen2.5's and Qwen3's tool-call tokens, one token each), the engine stops at
`</tool_call>`, the code runs in the sandbox (rollverify/tools/sandbox.py: no network, no
access to the user's files, limits on time, memory and processes), and what it printed comes
back as `<tool_response>\\n...\\n</tool_response>\\n`: tokens the policy did not sample (out of
the loss, OPS and verification), made from the output's text alone and appended to the ids
the engine produced (never re-tokenizing the trajectory). Then the policy goes on, up to
task.max_tool_calls calls. The reward is the math task's (math-verify on the final answer),
on any math data the math task reads; `task.prompt_template: retool` asks for this format.
"""

from __future__ import annotations

import importlib.util
import re

from rollverify.rollout.tool_calls import ToolOutput
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.math_task import MathTask, ProblemFiles
from rollverify.tasks.rewards.checks import RewardChecks
from rollverify.tools.sandbox import run_python

OPEN, CLOSE = "<tool_call>", "</tool_call>"
# What a tool call may import besides the standard library (those installed here): ReTool's
# interpreter does maths. The sandbox shows it nothing else (docs/sandbox.md).
MATH_PACKAGES = ("numpy", "sympy", "mpmath")
FENCE = re.compile(r"^\s*```(?:python|py)?\s*\n(.*?)\n?\s*```\s*$", re.DOTALL)


def tool_token(tokenizer, token: str) -> int:
    """The id of `token` if the tokenizer holds it as one token, else a ValueError naming the
    fix (a call's closing marker must be one token: the engine stops at a token id)."""
    ids = tokenizer(token, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(
            f"task.name: retool needs a tokenizer with {token} as one token (Qwen2.5 and Qwen3 "
            f"have it), but the model's splits it into {len(ids)}; use such a model"
        )
    return ids[0]


def call_code(text: str) -> str | None:
    """The code of the call that ends `text` (after its last <tool_call>), a ```python fence
    taken off; None if the text holds no opened call."""
    start = text.rfind(OPEN)
    if start < 0:
        return None
    code = text[start + len(OPEN) :].removesuffix(CLOSE)
    fenced = FENCE.match(code)
    return fenced.group(1) if fenced else code.strip("\n")


class PythonInterpreter:
    """ReTool's tool (rollout.tool_calls.ToolRunner): the call's code in the sandbox, in a
    worker thread beside the engine (a call takes ~0.1 s to its timeout). Should the sandbox
    fail for a call, the policy reads an error and the call is counted (ToolStats.broken, the
    step's sandbox_errors): the run goes on."""

    inline = False

    def __init__(
        self, tokenizer, timeout_s: float, memory_mb: int, max_output_chars: int = 2000
    ) -> None:
        self.tokenizer = tokenizer
        self.closing_token_id = tool_token(tokenizer, CLOSE)
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.max_output_chars = max_output_chars
        self.checks = RewardChecks()  # tells each kind of sandbox failure once
        self.packages = tuple(p for p in MATH_PACKAGES if importlib.util.find_spec(p))

    def run(self, trajectory: Trajectory) -> ToolOutput:
        text = self.tokenizer.decode(trajectory.token_ids.tolist(), skip_special_tokens=False)
        code = call_code(text)
        if code is None:
            return self._output("error: no <tool_call> before </tool_call>", error=True)
        try:
            limits = {"timeout_s": self.timeout_s, "memory_mb": self.memory_mb}
            result = run_python(code, **limits, packages=self.packages)
        except Exception as error:  # whatever the sandbox raised for this one call
            self.checks.sandbox_failed(error)
            told = f"error: the sandbox could not run the code ({type(error).__name__})"
            return self._output(told, error=True, broken=True)
        cpu = result.cpu_seconds if result.cpu_seconds is not None else result.seconds
        if result.timed_out:  # killed with its CPU time unread: at most its wall time
            told = f"error: timed out after {self.timeout_s:g} s"
            return self._output(told, timed_out=True, cpu_seconds=cpu)
        printed = result.stdout
        if result.exit_code != 0:  # the traceback's end says what went wrong
            printed += result.stderr[-self.max_output_chars :]
        return self._output(printed, error=result.exit_code != 0, cpu_seconds=cpu)

    def _output(
        self,
        printed: str,
        error: bool = False,
        timed_out: bool = False,
        cpu_seconds: float = 0,
        broken: bool = False,
    ) -> ToolOutput:
        if len(printed) > self.max_output_chars:
            printed = printed[: self.max_output_chars] + "\n... (output cut)"
        text = f"<tool_response>\n{printed.rstrip()}\n</tool_response>\n"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ToolOutput(ids, error, timed_out, broken, cpu_seconds)


class ReToolTask(MathTask):
    """The math task (same data, eval sets and reward) with a Python interpreter."""

    def __init__(
        self,
        tokenizer,
        files: ProblemFiles,
        answer_field: str | None = None,
        *,
        tool_timeout_s: float,
        tool_memory_mb: int,
    ) -> None:
        tool_token(tokenizer, CLOSE)  # refused now, before the data and the model load
        super().__init__(tokenizer, files, answer_field)
        self.tool_timeout_s, self.tool_memory_mb = tool_timeout_s, tool_memory_mb

    def tool_runner(self) -> PythonInterpreter:
        return PythonInterpreter(self.tokenizer, self.tool_timeout_s, self.tool_memory_mb)
