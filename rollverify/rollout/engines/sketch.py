"""A trajectory that counts its tokens instead of holding them: what `rvctl simulate` feeds the
simulated engine (engines/simulated.py). Its rules (truncation, the high-water mark behind
regenerated tokens) are Trajectory's own; only the storage (`_append`, `_keep`) differs."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rollverify.rollout.trajectory import Trajectory

_NONE = torch.empty(0)  # a Sketch's tensors: never read, never written


@dataclass
class Sketch(Trajectory):
    """A trajectory that holds how many tokens it has, not the tokens (no tensor work: at paper
    scale a run flushes and truncates millions of them)."""

    length: int = 0
    tool_outputs: list[tuple[int, int]] = field(default_factory=list)  # (after token, tokens)
    # one shared empty tensor, a plain default (no factory: 1,024 Sketches are made per step)
    token_ids: torch.Tensor = _NONE
    behavior_logprobs: torch.Tensor = _NONE
    versions: torch.Tensor = _NONE
    oldest_version: int | None = None  # of its first token (None: no tokens)
    # the prompt's tokens, read once: context_length is asked at every admission and preemption
    prompt_tokens: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        self.prompt_tokens = self.prompt_ids.shape[0]  # (no tensors to check)

    @classmethod
    def group(cls, prompt_ids: torch.Tensor, group_id: int, size: int) -> list[Sketch]:
        """A group's `size` fresh samples: one built, the rest copies of its fields (a dict
        copy each, a third of a dataclass's construction: 1,024 are made per step)."""
        first = cls(prompt_ids, group_id, 0)
        fields = first.__dict__
        samples = [first]
        for index in range(1, size):
            sample = object.__new__(cls)
            copied = sample.__dict__
            copied.update(fields)
            copied["sample_index"], copied["tool_outputs"] = index, []
            samples.append(sample)
        return samples

    def __len__(self) -> int:
        return self.length

    @property
    def context_length(self) -> int:
        """Prompt, generated tokens and the outputs of the calls among them."""
        if not self.tool_outputs:
            return self.prompt_tokens + self.length
        outputs = sum(tokens for after, tokens in self.tool_outputs if after <= self.length)
        return self.prompt_tokens + self.length + outputs

    def generate(self, count: int, version: int = 0) -> int:
        """`count` more tokens sampled at `version`; returns how many are regenerated ones."""
        start, self.length = self.length, self.length + count
        if count and self.oldest_version is None:
            self.oldest_version = version
        return self._regenerated(start)

    def _append(self, token_ids, logprobs, versions, policy: bool = True) -> None:
        self.length += token_ids.shape[0]

    def _keep(self, kept: int) -> None:
        self.length = kept
        # a call after a cut token goes when its tokens do (regenerated, they call again)
        self.tool_outputs = [(after, n) for after, n in self.tool_outputs if after <= kept]
        if kept == 0:
            self.oldest_version = None
