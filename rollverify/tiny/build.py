"""Rebuild the embedded default base model: a ~0.6M-parameter Qwen3, SFT-warmed on noisy chains.

    .venv/bin/python -m rollverify.tiny.build --out rollverify/assets/models/tiny-qwen3-chain

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
from transformers import Qwen3Config, Qwen3ForCausalLM
from trl import SFTConfig, SFTTrainer

from rollverify.tasks.chain import ChainTaskConfig, chain_reward, sample_problem, sample_problems
from rollverify.tiny.tokenizer import build_char_tokenizer


@dataclass(frozen=True)
class BuildConfig:
    seed: int = 0
    noise: float = 0.2  # probability of a slip per demonstrated step
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
    return Qwen3ForCausalLM(model_config)


def demonstrations(config: BuildConfig) -> Dataset:
    rng = random.Random(config.seed)
    problems = [sample_problem(rng) for _ in range(config.examples)]
    return Dataset.from_list(
        [{"prompt": p.prompt, "completion": p.solution(config.noise, rng)} for p in problems]
    )


@torch.no_grad()
def sampled_accuracy(model, tokenizer, count: int = 256, seed: int = 12345, greedy: bool = False):
    """Accuracy on the held-out problems (the eval set's seed), in batches with left padding."""
    problems = sample_problems(count, seed=seed, config=ChainTaskConfig())
    tokenizer.padding_side = "left"
    torch.manual_seed(seed)
    correct, lengths = 0, []
    for start in range(0, count, 64):
        chunk = problems[start : start + 64]
        inputs = tokenizer([p.prompt for p in chunk], return_tensors="pt", padding=True)
        out = model.generate(
            **inputs,
            max_new_tokens=320,
            do_sample=not greedy,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        for problem, row in zip(chunk, out[:, inputs["input_ids"].shape[1] :], strict=True):
            text = tokenizer.decode(row, skip_special_tokens=True)
            correct += chain_reward(text, problem.answer)
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

    tokenizer = build_char_tokenizer()
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
        train_sampling_strategy="group_by_length",  # the long tail would pad batches otherwise
    )
    start = time.time()
    trainer = SFTTrainer(
        model=model, args=sft, train_dataset=demonstrations(config), processing_class=tokenizer
    )
    result = trainer.train()
    train_seconds = time.time() - start
    model.eval()
    greedy, _ = sampled_accuracy(model, tokenizer, greedy=True)
    sampled, lengths = sampled_accuracy(model, tokenizer)
    median, p99 = lengths[len(lengths) // 2], lengths[int(0.99 * len(lengths))]
    info = {
        "build": asdict(config),
        "train_loss": result.training_loss,
        "losses": [e["loss"] for e in trainer.state.log_history if "loss" in e],
        "train_seconds": round(train_seconds, 1),
        "greedy_accuracy": greedy,
        "sampled_accuracy": sampled,
        "sampled_length_median": median,
        "sampled_length_p99": p99,
        "torch": torch.__version__,
    }
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    (args.out / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps({k: v for k, v in info.items() if k != "losses"}, indent=2))


if __name__ == "__main__":
    main()
