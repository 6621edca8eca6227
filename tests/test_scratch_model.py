"""The growing-length setting's shipped base model (experiments/scratch.yaml): it starts short,
writing the chain out about as often as its demonstrations did, short chains more often than
long ones (docs/results.md, designs v2 and v4)."""

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollverify.config import load_config
from rollverify.tiny.build import BuildConfig, work_rate
from rollverify.training.parts import make_task


def test_first_token_writes_the_chain_out_about_as_often_as_the_demonstrations():
    config = load_config("experiments/scratch.yaml")
    path = Path(config.model_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    build = BuildConfig(**json.loads((path / "build_info.json").read_text())["build"])
    guess = tokenizer.convert_tokens_to_ids("#")
    problems = make_task(config, tokenizer).eval_problems()
    written: dict[float, list[float]] = {}  # the build's work rate -> P(write out), by problem
    with torch.no_grad():
        for problem in problems:
            logits = model(torch.as_tensor(problem.prompt_ids)[None]).logits[0, -1]
            prompt = tokenizer.decode(problem.prompt_ids, skip_special_tokens=True)
            steps = int(prompt.split("x")[1].rstrip("="))  # Q:s+axn=
            rate = work_rate(build, steps)
            written.setdefault(rate, []).append(1 - logits.softmax(-1)[guess].item())
    assert len(written) == (2 if build.long_from else 1)
    # A build that weighs the guess's `#` above a chain's first token writes it out in <5%
    for rate, shares in written.items():
        share = sum(shares) / len(shares)
        assert rate / 2 <= share <= 2 * rate, (share, rate, len(shares))
