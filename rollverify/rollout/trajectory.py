"""Trajectories of partial rollout and the cache that holds the unfinished ones between steps.

A trajectory can be paused and resumed across policy updates, so every generated token carries
its behavior log-prob and the policy version that sampled it (docs/rules.md, section 1). The
cache is saved as one safetensors file whose header holds the JSON records: no pickle, so a
checkpoint can carry in-flight trajectories safely.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save as safetensors_bytes

from rollverify.infra.atomic_write import atomic_write_bytes

FINISH_REASONS = ("stop", "length")
_FORMAT = "rollverify.trajectory-cache/1"


def _empty(dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(0, dtype=dtype)


@dataclass
class Trajectory:
    """One sampled response to one prompt, possibly generated under several policy versions.

    prompt_ids:        long    [P]
    token_ids:         long    [L] generated tokens
    behavior_logprobs: float32 [L] log-prob of each token under the weights that sampled it
    versions:          long    [L] policy version (optimizer updates) of those weights
    group_id, sample_index: the GRPO group (one prompt) and this sample's place in it
    finish_reason: "stop" (end of sequence), "length" (token budget), None while unfinished
    high_water: the most tokens it ever had: tokens generated below it after a truncation are
        regenerated ones (the cost of verification, in the cost ledger)
    policy:            bool    [L] True on tokens the policy sampled, False on a tool's output
        (behavior log-prob 0, never read; version of the call); None: every token is the
        policy's (no tool output), what a tool-free trajectory costs nothing to say
    """

    prompt_ids: torch.Tensor
    group_id: int
    sample_index: int
    token_ids: torch.Tensor = field(default_factory=lambda: _empty(torch.long))
    behavior_logprobs: torch.Tensor = field(default_factory=lambda: _empty(torch.float32))
    versions: torch.Tensor = field(default_factory=lambda: _empty(torch.long))
    finish_reason: str | None = None
    high_water: int = 0
    policy: torch.Tensor | None = None

    def __post_init__(self) -> None:
        lengths = {len(self.token_ids), len(self.behavior_logprobs), len(self.versions)}
        if self.policy is not None:
            lengths.add(len(self.policy))
        if len(lengths) != 1:
            raise ValueError(
                f"trajectory ({self.group_id}, {self.sample_index}): token_ids, "
                f"behavior_logprobs, versions (and policy) must have one length, got "
                f"{len(self.token_ids)}, {len(self.behavior_logprobs)}, {len(self.versions)}"
            )
        if self.finish_reason not in (None, *FINISH_REASONS):
            raise ValueError(
                f"finish_reason={self.finish_reason!r} must be one of {FINISH_REASONS} or None"
            )

    @property
    def key(self) -> tuple[int, int]:
        return (self.group_id, self.sample_index)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def __len__(self) -> int:
        return self.token_ids.shape[0]  # (cheaper than len() of a tensor: a hot path)

    @property
    def context_length(self) -> int:
        """Prompt and generated tokens: what an engine prefills to continue it."""
        return self.prompt_ids.shape[0] + len(self)

    def extend(self, token_ids, logprobs, version: int) -> int:
        """Append tokens that policy `version` just generated, with their log-probs; returns
        how many of them regenerate positions a truncation had dropped."""
        token_ids = torch.as_tensor(token_ids, dtype=torch.long)
        logprobs = torch.as_tensor(logprobs, dtype=torch.float32)
        if token_ids.shape != logprobs.shape:
            raise ValueError(f"{len(token_ids)} tokens but {len(logprobs)} log-probs")
        start = len(self)
        self._append(token_ids, logprobs, torch.full(token_ids.shape, version, dtype=torch.long))
        return self._regenerated(start)

    def extend_tool_output(self, token_ids, version: int) -> None:
        """Append a tool's output (tokens the policy did not sample) after a call the policy made
        at `version`: no behavior log-prob (0, never read), the call's version, policy False."""
        token_ids = torch.as_tensor(token_ids, dtype=torch.long)
        count = token_ids.shape[0]
        if self.policy is None:
            self.policy = torch.ones(len(self), dtype=torch.bool)
        self._append(token_ids, torch.zeros(count), torch.full((count,), version), policy=False)
        self.high_water = max(self.high_water, len(self))  # not the policy's: not regenerated

    def policy_mask(self) -> torch.Tensor:
        """bool [L]: True on the policy's tokens (all of them without tool output)."""
        return torch.ones(len(self), dtype=torch.bool) if self.policy is None else self.policy

    def truncate(self, kept: int) -> int:
        """Keep the first `kept` tokens (the verified prefix); returns how many were dropped."""
        if not 0 <= kept <= len(self):
            raise ValueError(f"kept={kept} must be in [0, {len(self)}]")
        dropped = len(self) - kept
        self._keep(kept)
        if dropped:
            self.finish_reason = None
        return dropped

    def _regenerated(self, start: int) -> int:
        """Of the tokens from `start` to the end, those below the high-water mark: positions a
        truncation had dropped, generated again. Raises the mark."""
        end = len(self)
        before, self.high_water = self.high_water, max(self.high_water, end)
        return max(0, min(end, before) - start)

    # Storage: the only methods that touch the tensors (engines/simulated.py's Sketch counts).

    def _append(self, token_ids, logprobs, versions, policy: bool = True) -> None:
        if self.policy is not None:
            self.policy = torch.cat([self.policy, torch.full(token_ids.shape, policy)])
        if len(self):
            self.token_ids = torch.cat([self.token_ids, token_ids])
            self.behavior_logprobs = torch.cat([self.behavior_logprobs, logprobs])
            self.versions = torch.cat([self.versions, versions])
        else:  # nothing to keep: the new tensors are the trajectory's (no copy)
            self.token_ids, self.behavior_logprobs, self.versions = token_ids, logprobs, versions

    def _keep(self, kept: int) -> None:
        # clone: a view would keep the dropped suffix's memory alive in the cache
        self.token_ids = self.token_ids[:kept].clone()
        self.behavior_logprobs = self.behavior_logprobs[:kept].clone()
        self.versions = self.versions[:kept].clone()
        if self.policy is not None:
            self.policy = self.policy[:kept].clone()


@dataclass
class PaddedTrajectories:
    """A batch of trajectories right-padded to the longest: what OPS and verify read.

    behavior_logprobs: float32 [B, T] (pad 0)
    versions:          long    [B, T] (pad -1)
    mask:              bool    [B, T] True on generated tokens
    policy:            bool    [B, T] True on the policy's tokens (mask less tool output): what
                       OPS, verification and acceptance count
    """

    behavior_logprobs: torch.Tensor
    versions: torch.Tensor
    mask: torch.Tensor
    policy: torch.Tensor

    @classmethod
    def of(cls, trajectories: list[Trajectory]) -> PaddedTrajectories:
        def pad(rows: list[torch.Tensor], value: float) -> torch.Tensor:
            return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=value)

        if not trajectories:
            dtypes = (torch.float32, torch.long, torch.bool, torch.bool)
            return cls(*(_empty(d).reshape(0, 0) for d in dtypes))
        lengths = torch.tensor([len(t) for t in trajectories])
        width = int(lengths.max())
        mask = torch.arange(width) < lengths[:, None]
        policy = mask
        if any(t.policy is not None for t in trajectories):
            policy = pad([t.policy_mask() for t in trajectories], False)
        return cls(
            behavior_logprobs=pad([t.behavior_logprobs for t in trajectories], 0.0),
            versions=pad([t.versions for t in trajectories], -1),
            mask=mask,
            policy=policy,
        )


class TrajectoryCache:
    """Unfinished trajectories waiting to resume, in the order they were paused (FIFO)."""

    def __init__(self, trajectories: list[Trajectory] | None = None) -> None:
        self._items: dict[tuple[int, int], Trajectory] = {}
        for trajectory in trajectories or []:
            self.add(trajectory)

    def add(self, trajectory: Trajectory) -> None:
        key = trajectory.key
        if key in self._items:
            raise ValueError(f"trajectory {key} is already cached")
        self._items[key] = trajectory

    def pop(self, key: tuple[int, int]) -> Trajectory:
        return self._items.pop(key)

    def take_all(self) -> list[Trajectory]:
        """Empty the cache, returning its trajectories oldest first."""
        items, self._items = list(self._items.values()), {}
        return items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Trajectory]:
        return iter(list(self._items.values()))

    def __contains__(self, key: tuple[int, int]) -> bool:
        return key in self._items

    @property
    def num_tokens(self) -> int:
        return sum(len(t) for t in self._items.values())

    def to_tensors(self) -> tuple[dict[str, torch.Tensor], list[dict]]:
        """The cache as concatenated tensors and one JSON record per trajectory."""
        tensors, metadata = _to_tensors(list(self))
        return tensors, json.loads(metadata["records"])

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], records: list[dict]) -> TrajectoryCache:
        return cls(_from_tensors(tensors, records, "checkpoint"))

    def save(self, path: str | Path) -> None:
        """Write the cache atomically to one safetensors file (tensors + JSON records)."""
        atomic_write_bytes(path, safetensors_bytes(*_to_tensors(list(self))))

    @classmethod
    def load(cls, path: str | Path) -> TrajectoryCache:
        try:
            with safe_open(str(path), framework="pt") as file:
                metadata = file.metadata() or {}
                tensors = {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118 (safe_open is not iterable)
        except Exception as error:  # safetensors raises several types for a broken file
            raise ValueError(f"{path}: not a readable trajectory cache ({error})") from None
        if metadata.get("format") != _FORMAT:
            raise ValueError(f"{path}: format {metadata.get('format')!r}, expected {_FORMAT!r}")
        return cls(_from_tensors(tensors, json.loads(metadata["records"]), path))


def _to_tensors(trajectories: list[Trajectory]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Concatenate the variable-length fields and record the lengths that split them again."""

    def cat(name: str, dtype: torch.dtype) -> torch.Tensor:
        rows = [getattr(t, name).to(dtype) for t in trajectories]
        return torch.cat(rows) if rows else _empty(dtype)

    tensors = {
        "prompt_ids": cat("prompt_ids", torch.long),
        "prompt_lengths": torch.tensor([len(t.prompt_ids) for t in trajectories], dtype=torch.long),
        "token_ids": cat("token_ids", torch.long),
        "behavior_logprobs": cat("behavior_logprobs", torch.float32),
        "versions": cat("versions", torch.long),
        "token_lengths": torch.tensor([len(t) for t in trajectories], dtype=torch.long),
    }
    if any(t.policy is not None for t in trajectories):  # tool output: which tokens are whose
        tensors["policy"] = torch.cat([t.policy_mask() for t in trajectories])
    records = [
        {
            "group_id": t.group_id,
            "sample_index": t.sample_index,
            "finish_reason": t.finish_reason,
            "high_water": t.high_water,
            **({"tool_output": True} if t.policy is not None else {}),
        }
        for t in trajectories
    ]
    return tensors, {"format": _FORMAT, "records": json.dumps(records)}


def _from_tensors(tensors: dict[str, torch.Tensor], records: list[dict], path) -> list[Trajectory]:
    prompt_lengths = tensors["prompt_lengths"].tolist()
    token_lengths = tensors["token_lengths"].tolist()
    tokens_in = {len(tensors[name]) for name in ("token_ids", "policy") if name in tensors}
    tool_output = any(r.get("tool_output") for r in records)
    if (
        not (len(records) == len(prompt_lengths) == len(token_lengths))
        or tokens_in != {sum(token_lengths)}
        or tool_output != ("policy" in tensors)
    ):
        raise ValueError(f"{path}: trajectory cache is inconsistent (lengths do not add up)")
    prompts = tensors["prompt_ids"].split(prompt_lengths)
    tokens = tensors["token_ids"].split(token_lengths)
    logprobs = tensors["behavior_logprobs"].split(token_lengths)
    versions = tensors["versions"].split(token_lengths)
    policies = tensors["policy"].split(token_lengths) if tool_output else [None] * len(records)
    return [
        Trajectory(
            p.clone(),
            r["group_id"],
            r["sample_index"],
            t.clone(),
            lp.clone(),
            v.clone(),
            r["finish_reason"],
            r.get("high_water", len(t)),
            policy.clone() if r.get("tool_output") else None,
        )
        for r, p, t, lp, v, policy in zip(
            records, prompts, tokens, logprobs, versions, policies, strict=True
        )
    ]
