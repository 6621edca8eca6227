"""A random tiny Qwen3 over bytes, built in milliseconds without training: the model of the
engine tests and of benchmarks/runs_unchanged.py's code and math runs (any text, one token
per byte), which samples chosen tokens (EOS, a tool's markers) about as often as asked."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM


def random_config(vocab_size: int, pad: int, eos: int, **more) -> Qwen3Config:
    """The tiny random models' shape: 2 layers of width 32 (`more`: other Qwen3Config fields)."""
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        pad_token_id=pad,
        eos_token_id=eos,
        **more,
    )


def byte_tokenizer(special: list[str]) -> PreTrainedTokenizerFast:
    """Any text, one token per byte (as a BPE model's byte fallback), and `special` tokens."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    core = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>")
    tokenizer.add_special_tokens({"additional_special_tokens": special})
    return tokenizer


def byte_model(folder, special: list[str], odds: dict[str, float]):
    """A random tiny Qwen3 over bytes (byte_tokenizer(special) and a pad token), saved in
    `folder`, that samples each token of `odds` with about that probability at every position
    (the rest near uniform): the frequency of EOS (so lengths vary) and of a tool's markers
    (so calls are made) without training. How: every embedding carries a constant 5 in
    dimension 0, which the final norm keeps near sqrt(hidden) whatever the context; lm_head's
    column 0 turns it into a per-token logit offset."""
    tokenizer = byte_tokenizer(special)
    tokenizer.add_special_tokens({"pad_token": "<pad>"})
    torch.manual_seed(0)
    config = random_config(
        len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, tie_word_embeddings=False
    )
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 5.0
        model.lm_head.weight[:, 0] = 0.0
        constant = model.model(torch.arange(2, 12)[None]).last_hidden_state[0, :, 0].mean()
        others, rest = len(tokenizer) - len(odds), 1.0 - sum(odds.values())
        for token, probability in odds.items():  # p / rest = e^logit / others (theirs near 0)
            logit = torch.log(torch.tensor(probability * others / rest))
            model.lm_head.weight[tokenizer.convert_tokens_to_ids(token), 0] = logit / constant
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
