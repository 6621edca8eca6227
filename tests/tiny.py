"""A random tiny Qwen3 for engine and scheduling tests (no training needed, built in ms)."""

from __future__ import annotations

import torch
from transformers import Qwen3ForCausalLM

from rollverify.rollout.trajectory import Trajectory
from rollverify.tiny.byte_model import byte_model, byte_tokenizer, random_config

__all__ = ["byte_model", "byte_tokenizer", "random_config"]  # where the tests found them

VOCAB, PAD, EOS = 20, 0, 1


def random_model(seed: int = 0, eos_bias: float = 0.0) -> Qwen3ForCausalLM:
    """eos_bias shifts the EOS logit: negative makes long responses (a long tail)."""
    torch.manual_seed(seed)
    config = random_config(VOCAB, PAD, EOS, tie_word_embeddings=False)
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight[EOS] *= 0
        model.lm_head.bias = None
    if eos_bias:
        _add_eos_bias(model, eos_bias)
    return model


def _add_eos_bias(model: Qwen3ForCausalLM, bias: float) -> None:
    # The final norm's output times a zero EOS row gives logit 0; add a constant via a hook.
    def hook(module, args, output):
        output[..., EOS] += bias
        return output

    model.lm_head.register_forward_hook(hook)


def prompts(count: int, seed: int = 0, length: tuple[int, int] = (3, 9)) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randint(
            2, VOCAB, (int(torch.randint(*length, (1,), generator=generator)),), generator=generator
        )
        for _ in range(count)
    ]


@torch.no_grad()
def teacher_forced_logprobs(model, trajectory: Trajectory, temperature: float = 1.0):
    """log p(token) of each generated token from one full forward pass: float [L]."""
    ids = torch.cat([trajectory.prompt_ids, trajectory.token_ids])[None]
    logits = model(ids).logits[0, :-1].float() / temperature
    logprobs = torch.log_softmax(logits, -1)[len(trajectory.prompt_ids) - 1 :]
    return logprobs.gather(1, trajectory.token_ids[:, None]).squeeze(1)
