"""The growing-length setting's shipped base model (experiments/scratch.yaml): it starts short,
writing the chain out about as often as its demonstrations did (docs/results.md, design v2)."""

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollverify.config import load_config
from rollverify.training.parts import make_task


def test_first_token_writes_the_chain_out_about_as_often_as_the_demonstrations():
    config = load_config("experiments/scratch.yaml")
    path = Path(config.model_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    work_rate = json.loads((path / "build_info.json").read_text())["build"]["work_rate"]
    guess = tokenizer.convert_tokens_to_ids("#")
    problems = make_task(config, tokenizer).eval_problems()
    with torch.no_grad():
        answered_at_once = [
            model(torch.as_tensor(p.prompt_ids)[None]).logits[0, -1].softmax(-1)[guess].item()
            for p in problems
        ]
    written = 1 - sum(answered_at_once) / len(answered_at_once)
    # A build that weighs the guess's `#` above a chain's first token writes it out in <5%
    assert work_rate / 2 <= written <= 2 * work_rate, (written, work_rate)
