"""Truncated sampling (rollout.top_k, rollout.top_p): which tokens an engine may sample.

The policy the trainer scores, verifies and updates is the full softmax at the temperature
(TRL's loss divides the logits by it and truncates nothing); top-k and top-p only narrow
what an engine samples from it. So the behavior log-prob an engine reports for a token is the
token's log-prob under that full softmax, the trainer's own quantity: under the weights it was
sampled with, a fresh sample has OPS 0 and importance ratio 1, truncated or not. (vLLM's
processed log-probs, which TRL's importance-sampling correction reads, are renormalized over
the kept tokens: with truncation they would make every fresh sample look off-policy, the
verifier would cut fresh tokens, and every ratio would start below 1.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (the config reads `truncated`: no torch for that)
    import torch


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0  # 1: no nucleus truncation
    top_k: int = 0  # 0: no top-k truncation

    @property
    def truncated(self) -> bool:
        return self.top_p < 1.0 or self.top_k > 0

    def allowed(self, logprobs: torch.Tensor) -> torch.Tensor:
        """What to sample from, given log-probs [rows, vocab] at the temperature: the same,
        with the tokens outside the top-k / nucleus at -inf (transformers' own warpers, in
        the order vLLM applies them: top-k, then top-p)."""
        if not self.truncated:  # (every decode step of the hf engine comes here)
            return logprobs
        from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

        if self.top_k > 0:
            logprobs = TopKLogitsWarper(self.top_k)(None, logprobs)
        if self.top_p < 1.0:
            logprobs = TopPLogitsWarper(self.top_p)(None, logprobs)
        return logprobs

    def vllm_logprobs_mode(self) -> str:
        """vLLM returns log-probs either before the temperature and truncation (raw) or after
        both (processed). At temperature 1 raw is the untruncated softmax (and equals processed
        when nothing is truncated); elsewhere only processed has the temperature, so truncation
        on vLLM wants temperature 1 (config/check_links.py)."""
        return "raw_logprobs" if self.temperature == 1 else "processed_logprobs"

    def vllm_params(self) -> dict[str, float | int]:
        """The request's sampling fields of vLLM's SamplingParams."""
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k}
