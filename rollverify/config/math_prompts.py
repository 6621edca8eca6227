"""How a math task's prompt is made from a record (`task.prompt_field`, `task.answer_field`,
`task.prompt_template`): the fields tried for the problem and its answer, and the templates.

A template is one of the names below or a literal text holding `{problem}`. The problem is
put in by plain replacement, not str.format: problems and templates hold LaTeX braces.
Prompts that are chat messages already (verl/DAPO Parquet) get no template. The config's
fields are checked against these names when it loads; the math data reader
(rollverify/tasks/data/math_problems.py) tries the fields.
"""

from __future__ import annotations

# Tried in order, per record: the first that holds a usable value is taken.
PROMPT_FIELDS = ("prompt", "problem", "question", "Problem", "Question")
ANSWER_FIELDS = (
    "answer",
    "final_answer",
    "Answer",
    "ground_truth",
    "reward_model.ground_truth",
    "solution",
)

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
DAPO_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be "
    "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem."
    '\n\n{problem}\n\nRemember to put your answer on its own line after "Answer:".'
)
RETOOL_TEMPLATE = (
    "Solve the following math problem step by step. You may run Python code to help: write "
    "it between <tool_call> and </tool_call>, and what it prints comes back between "
    "<tool_response> and </tool_response>. Put your final answer within \\boxed{}."
    "\n\n{problem}"
)
PROMPT_TEMPLATES = {
    "boxed": "{problem}\n\n" + INSTRUCTION,  # rllm's instruction; the reward reads \boxed{}
    "dapo": DAPO_TEMPLATE,  # DAPO-Math's; the reward reads the last "Answer:" line
    "retool": RETOOL_TEMPLATE,  # the retool task's: code in tool calls (tasks/retool.py)
}
PLACEHOLDER = "{problem}"


def valid_template(template: str) -> bool:
    return template in PROMPT_TEMPLATES or PLACEHOLDER in template


def render_prompt(template: str, problem: str) -> str:
    """The user message for `problem` under `template` (a name or a literal with {problem})."""
    text = PROMPT_TEMPLATES.get(template, template)
    if PLACEHOLDER not in text:
        known = ", ".join(PROMPT_TEMPLATES)
        raise ValueError(
            f"task.prompt_template: {template!r} is neither a known name ({known}) nor a "
            f"text holding {PLACEHOLDER}"
        )
    return text.replace(PLACEHOLDER, problem)
