"""Rebuild the embedded default base model: a ~0.6M-parameter Qwen3, SFT-warmed on noisy chains.

    .venv/bin/python -m rollverify.tiny.build --out rollverify/assets/models/tiny-qwen3-chain

and the chain_tool task's, whose demonstrations call the calculator at some steps
(rollverify/tasks/chain_tool.py):

    .venv/bin/python -m rollverify.tiny.build --task chain_tool --call-rate 0.3 \
        --out rollverify/assets/models/tiny-qwen3-chain-tool

and the growing-length setting's (experiments/scratch.yaml), whose demonstrations answer at once
with a guessed digit (`#d`) in 85% of problems and write the chain out in 15%:

    .venv/bin/python -m rollverify.tiny.build --task scratch --work-rate 0.15 --max-steps 64 \
        --alpha 1.4 --examples 30000 --init rollverify/assets/models/tiny-qwen3-chain \
        --out rollverify/assets/models/tiny-qwen3-scratch

and its design v4 (docs/results.md), which writes chains of 1-2 steps out in 30% of problems and
longer ones in 5%:

    .venv/bin/python -m rollverify.tiny.build --task scratch --work-rate 0.3 --long-from 3 \
        --long-work-rate 0.05 --max-steps 64 --alpha 1.4 --examples 30000 \
        --init rollverify/assets/models/tiny-qwen3-chain \
        --out rollverify/assets/models/tiny-qwen3-scratch-v4

Deterministic for a given seed on CPU. The shipped checkpoint (rollverify/assets/models/, the
package's data: config model.path `models/tiny-qwen3-chain`) was made with the
defaults below; build_info.json beside it records the settings, the losses and the base
model's accuracy on the held-out eval set.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config, Qwen3ForCausalLM
from trl import SFTConfig, SFTTrainer

from rollverify.config import load_config
from rollverify.rollout.engines.hf_engine import HFEngine
from rollverify.rollout.tool_calls import calls_made
from rollverify.rollout.trajectory import Trajectory
from rollverify.tasks.chain import (
    ChainProblem,
    ChainTaskConfig,
    chain_reward,
    sample_problem,
    sample_problems,
)
from rollverify.tasks.chain_tool import ChainToolTask, solution_with_calls
from rollverify.tasks.walk import WalkProblem, walk_reward
from rollverify.tiny.tokenizer import CHARACTERS, TOOL_CHARACTERS, build_char_tokenizer
from rollverify.training.parts import with_tools


@dataclass(frozen=True)
class BuildConfig:
    task: str = "chain"  # or chain_tool, walk, scratch (the chain task, answered at once or not)
    call_rate: float = 0.3  # chain_tool: probability that a demonstrated step calls the tool
    # scratch: the share of problems whose demonstration writes the chain out; the others answer
    # at once with a guessed digit (`#d`), which the chain task's reward alone scores
    work_rate: float = 0.15
    # scratch: chains of long_from steps or more are written out at long_work_rate instead
    # (0: every chain at work_rate), as a base model works easy problems out and guesses at
    # hard ones
    long_from: int = 0
    long_work_rate: float = 0.0
    seed: int = 0
    noise: float = 0.2  # probability of a slip per demonstrated step
    max_steps: int = 32  # the chain task's distribution (ChainTaskConfig): chains of 1..max_steps
    alpha: float = 1.3  # P(n) ~ n^-alpha
    examples: int = 60_000
    epochs: float = 1.0
    batch_size: int = 64
    learning_rate: float = 3e-3
    hidden_size: int = 128
    layers: int = 3
    heads: int = 4
    kv_heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 512
    threads: int = 1  # measured: 1 thread beats 2 when another process shares the 2 cores
    init: str = ""  # a base model to warm from (its tokenizer's characters a prefix of ours)


def build_model(config: BuildConfig, vocab_size: int, pad_id: int, eos_id: int) -> Qwen3ForCausalLM:
    model_config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads,
        head_dim=config.hidden_size // config.heads,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=None,
        torch_dtype="float32",
    )
    torch.manual_seed(config.seed)
    if config.init:  # warmed from a base: same shape, the new characters' embeddings added
        model = AutoModelForCausalLM.from_pretrained(config.init)
        model.resize_token_embeddings(vocab_size)
        model.config.pad_token_id, model.config.eos_token_id = pad_id, eos_id
        return model
    return Qwen3ForCausalLM(model_config)


def task_config(config: BuildConfig) -> ChainTaskConfig:
    return ChainTaskConfig(max_steps=config.max_steps, alpha=config.alpha)


def longest_response(task: ChainTaskConfig) -> int:
    """Tokens of the longest correct response (one character a token), with its eos."""
    return len(ChainProblem(0, 1, task.max_steps).solution()) + 1


def demonstrations(config: BuildConfig) -> Dataset:
    rng = random.Random(config.seed)
    kind = WalkProblem if config.task == "walk" else ChainProblem
    problems = [sample_problem(rng, task_config(config), kind) for _ in range(config.examples)]

    def solution(problem: ChainProblem) -> str:
        if config.task == "chain_tool":
            return solution_with_calls(problem, config.noise, config.call_rate, rng)
        if config.task == "scratch" and rng.random() >= work_rate(config, problem.steps):
            return f"#{rng.randint(0, 9)}"  # a guess, answered at once
        return problem.solution(config.noise, rng)

    return Dataset.from_list([{"prompt": p.prompt, "completion": solution(p)} for p in problems])


def work_rate(config: BuildConfig, steps: int) -> float:
    """scratch: the share of demonstrations of an n-step chain that write it out."""
    if config.long_from and steps >= config.long_from:
        return config.long_work_rate
    return config.work_rate


def sampling_strategy(config: BuildConfig) -> str:
    """Batches of like length save padding on the long tail, but the loss is a mean over a
    batch's tokens: a batch of two-token guesses weighs its `#` some fifty times more than a
    batch of written chains weighs its first token, and a scratch model built so wrote its chain
    out in under 5% of samples with 15% of demonstrations doing so. Mixed batches keep every
    token's weight equal, so the scratch model's first token matches its demonstrations."""
    return "random" if config.task == "scratch" else "group_by_length"


def tool_accuracy(model, tokenizer, count: int = 256, seed: int = 12345) -> tuple[float, float]:
    """chain_tool: sampled accuracy on the held-out problems, the calculator answering calls
    (the training run's engine and tool), and the calls per response."""
    engine = HFEngine(
        model,
        slots=64,
        max_new_tokens=320,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        seed=seed,
    )
    task = ChainToolTask(tokenizer, ChainTaskConfig(), 0, count, seed)
    config = load_config(overrides={"task.name": "chain_tool"})
    problems = task.eval_problems()
    trajectories = [Trajectory(p.prompt_ids, i, 0) for i, p in enumerate(problems)]
    with with_tools(engine, task, config) as tools:
        tools.submit(trajectories)
        while tools.has_work:
            tools.poll()
    rewards = [
        task.reward_tokens(t.token_ids.tolist(), problems[t.group_id].answer) for t in trajectories
    ]
    return sum(rewards) / count, sum(calls_made(t) for t in trajectories) / count


@torch.no_grad()
def sampled_accuracy(
    model,
    tokenizer,
    count: int = 256,
    seed: int = 12345,
    greedy: bool = False,
    task: ChainTaskConfig = ChainTaskConfig(),
    walk: bool = False,
):
    """Accuracy on the held-out problems (the eval set's seed), in batches with left padding."""
    kind, reward = (WalkProblem, walk_reward) if walk else (ChainProblem, chain_reward)
    problems = sample_problems(count, seed=seed, config=task, kind=kind)
    tokenizer.padding_side = "left"
    torch.manual_seed(seed)
    correct, lengths = 0, []
    for start in range(0, count, 64):
        chunk = problems[start : start + 64]
        inputs = tokenizer([p.prompt for p in chunk], return_tensors="pt", padding=True)
        out = model.generate(
            **inputs,
            max_new_tokens=max(320, longest_response(task) + 32),
            do_sample=not greedy,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        for problem, row in zip(chunk, out[:, inputs["input_ids"].shape[1] :], strict=True):
            text = tokenizer.decode(row, skip_special_tokens=True)
            correct += reward(text, problem.answer)
            lengths.append(int((row != tokenizer.pad_token_id).sum()))
    return correct / count, sorted(lengths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    for name, value in asdict(BuildConfig()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = parser.parse_args()
    config = BuildConfig(**{k: getattr(args, k) for k in asdict(BuildConfig())})
    torch.set_num_threads(config.threads)

    characters = TOOL_CHARACTERS if config.task == "chain_tool" else CHARACTERS
    tokenizer = build_char_tokenizer(characters)
    model = build_model(config, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
    sft = SFTConfig(
        output_dir=str(args.out / "_sft"),
        num_train_epochs=config.epochs,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=50,
        weight_decay=0.0,
        logging_steps=50,
        save_strategy="no",
        report_to="none",
        seed=config.seed,
        bf16=False,
        use_cpu=True,
        dataloader_num_workers=0,
        max_length=config.max_positions,
        completion_only_loss=True,
        train_sampling_strategy=sampling_strategy(config),
    )
    start = time.time()
    trainer = SFTTrainer(
        model=model, args=sft, train_dataset=demonstrations(config), processing_class=tokenizer
    )
    result = trainer.train()
    train_seconds = time.time() - start
    model.eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    info = {
        "build": asdict(config),
        "train_loss": result.training_loss,
        "losses": [e["loss"] for e in trainer.state.log_history if "loss" in e],
        "train_seconds": round(train_seconds, 1),
    }
    if config.task == "chain_tool":  # as training loads it (the engine's attention)
        saved = AutoModelForCausalLM.from_pretrained(args.out)
        sampled, calls = tool_accuracy(saved, AutoTokenizer.from_pretrained(args.out))
        info |= {"sampled_accuracy": sampled, "tool_calls_per_response": calls}
    else:
        task, walk = task_config(config), config.task == "walk"
        greedy, _ = sampled_accuracy(model, tokenizer, greedy=True, task=task, walk=walk)
        sampled, lengths = sampled_accuracy(model, tokenizer, task=task, walk=walk)
        median, p99 = lengths[len(lengths) // 2], lengths[int(0.99 * len(lengths))]
        info |= {
            "greedy_accuracy": greedy,
            "sampled_accuracy": sampled,
            "sampled_length_median": median,
            "sampled_length_p99": p99,
        }
    info["torch"] = torch.__version__
    (args.out / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps({k: v for k, v in info.items() if k != "losses"}, indent=2))


if __name__ == "__main__":
    main()
