"""In-process rollout engine on transformers: continuous batching over a fixed number of slots.

Each `poll()` is one engine step: every running trajectory decodes one token, then free slots
take queued trajectories at once (their prefill yields their first token). Running rows share
one left-padded KV cache ([rows, heads, width, head_dim] per layer); a finished row leaves it and
a new row joins it in the same step. Everything is synchronous and seeded, so a run is
reproducible on CPU, pauses included.

Sampling is from the full softmax at `temperature` (no top-k/top-p); the behavior log-prob of
a token is log_softmax(logits / temperature), the quantity TRL's loss recomputes.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from transformers import DynamicCache, PreTrainedModel

from rollverify.engines.protocol import EngineStats
from rollverify.trajectory import Trajectory


class HFEngine:
    def __init__(
        self,
        model: PreTrainedModel,
        slots: int,
        max_new_tokens: int,
        eos_token_id: int,
        pad_token_id: int,
        temperature: float = 1.0,
        seed: int = 0,
        version: int = 0,
    ) -> None:
        self.model = copy.deepcopy(model).eval().requires_grad_(False)  # the engine's own weights
        self.slots = slots
        self.max_new_tokens = max_new_tokens
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.temperature = temperature
        self.version = version
        self.generator = torch.Generator().manual_seed(seed)
        self.stats = EngineStats()
        self._queue: deque[Trajectory] = deque()
        self._rows: list[Trajectory] = []  # running, in cache row order
        self._cache: DynamicCache | None = None
        self._attention: torch.Tensor = torch.zeros(0, 0, dtype=torch.long)  # [rows, width]
        self._next_input: torch.Tensor = torch.zeros(0, dtype=torch.long)  # [rows] sampled, unfed

    # -- the engine interface ---------------------------------------------------------------

    def submit(self, trajectories: list[Trajectory]) -> None:
        for trajectory in trajectories:
            if trajectory.finished:
                raise ValueError(f"trajectory {trajectory.key} is finished; submit unfinished ones")
            self._queue.append(trajectory)

    def idle_slots(self) -> int:
        return max(0, self.slots - len(self._rows) - len(self._queue))

    @property
    def has_work(self) -> bool:
        return bool(self._rows or self._queue)

    @torch.no_grad()
    def poll(self) -> list[Trajectory]:
        finished: list[Trajectory] = []
        if self._rows:
            finished += self._decode_running_rows()
        free = self.slots - len(self._rows)
        if free > 0 and self._queue:
            admitted = [self._queue.popleft() for _ in range(min(free, len(self._queue)))]
            finished += self._admit(admitted)
        return finished

    def pause(self) -> list[Trajectory]:
        paused = self._rows + list(self._queue)
        self.stats.aborted += len(paused)
        self._queue.clear()
        self._drop_rows(list(range(len(self._rows))))
        return paused

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        if self.has_work:
            raise RuntimeError("pause the engine before loading weights: in-flight KV is stale")
        state = dict(named_tensors)
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
            raise ValueError(
                f"weights do not fit the engine's model: missing {missing}, unexpected {unexpected}"
            )
        self.version = version

    @contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        training, stats = self.generator, self.stats
        self.generator, self.stats = torch.Generator().manual_seed(seed), EngineStats()
        try:
            yield
        finally:
            self.generator, self.stats = training, stats

    def reset_stats(self) -> None:
        self.stats = EngineStats()

    # -- one step -----------------------------------------------------------------------------

    def _decode_running_rows(self) -> list[Trajectory]:
        """Feed each running row its last sampled token; sample the next one."""
        rows = len(self._rows)
        self._attention = torch.cat([self._attention, torch.ones(rows, 1, dtype=torch.long)], 1)
        positions = self._attention.sum(-1, keepdim=True) - 1  # [rows, 1]
        out = self.model(
            input_ids=self._next_input[:, None],
            attention_mask=self._attention,
            position_ids=positions,
            past_key_values=self._cache,
            use_cache=True,
        )
        self._cache = out.past_key_values
        self.stats.decode_steps += 1
        self.stats.slot_steps_busy += rows
        return self._sample_and_retire(out.logits[:, -1, :], list(range(rows)))

    def _admit(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        """Prefill prompt + kept prefix of each new row (left-padded), sample its next token."""
        contexts = [torch.cat([t.prompt_ids, t.token_ids]) for t in trajectories]
        width = max(len(c) for c in contexts)
        input_ids = torch.full((len(contexts), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(contexts), width), dtype=torch.long)
        for i, context in enumerate(contexts):
            input_ids[i, width - len(context) :] = context
            attention[i, width - len(context) :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True
        )
        self.stats.tokens_prefilled += int(attention.sum())
        first_new = len(self._rows)
        self._rows += trajectories
        self._merge_cache(out.past_key_values, attention)
        new_rows = list(range(first_new, len(self._rows)))
        return self._sample_and_retire(out.logits[:, -1, :], new_rows)

    def _sample_and_retire(self, logits: torch.Tensor, rows: list[int]) -> list[Trajectory]:
        """Sample one token for each of `rows` (logits [len(rows), vocab]); drop finished rows."""
        logprobs = torch.log_softmax(logits.float() / self.temperature, dim=-1)
        tokens = torch.multinomial(logprobs.exp(), 1, generator=self.generator).squeeze(1)
        token_logprobs = logprobs.gather(1, tokens[:, None]).squeeze(1)
        if len(self._next_input) < len(self._rows):
            grown = torch.zeros(len(self._rows), dtype=torch.long)
            grown[: len(self._next_input)] = self._next_input
            self._next_input = grown
        self._next_input[rows] = tokens
        done: list[int] = []
        for row, token, logprob in zip(rows, tokens.tolist(), token_logprobs.tolist(), strict=True):
            trajectory = self._rows[row]
            trajectory.extend([token], [logprob], self.version)
            self.stats.tokens_generated += 1
            if token == self.eos_token_id:
                trajectory.finish_reason = "stop"
            elif len(trajectory) >= self.max_new_tokens:
                trajectory.finish_reason = "length"
            if trajectory.finished:
                done.append(row)
        finished = [self._rows[row] for row in done]
        self._drop_rows(done)
        return finished

    # -- the shared left-padded KV cache ------------------------------------------------------

    def _merge_cache(self, new_cache: DynamicCache, new_attention: torch.Tensor) -> None:
        """Append new rows to the running cache, left-padding the narrower side."""
        if self._cache is None or self._attention.shape[0] == 0:
            self._cache, self._attention = new_cache, new_attention
            return
        width = max(self._attention.shape[1], new_attention.shape[1])
        for old, new in zip(self._cache.layers, new_cache.layers, strict=True):
            old.keys = torch.cat([_left_pad(old.keys, width), _left_pad(new.keys, width)])
            old.values = torch.cat([_left_pad(old.values, width), _left_pad(new.values, width)])
        self._attention = torch.cat(
            [_left_pad(self._attention, width, dim=1), _left_pad(new_attention, width, dim=1)]
        )

    def _drop_rows(self, rows: list[int]) -> None:
        if not rows:
            return
        keep = [i for i in range(len(self._rows)) if i not in set(rows)]
        self._rows = [self._rows[i] for i in keep]
        if not keep:
            self._cache = None
            self._attention = torch.zeros(0, 0, dtype=torch.long)
            self._next_input = torch.zeros(0, dtype=torch.long)
            return
        index = torch.tensor(keep)
        self._attention = self._attention[index]
        self._next_input = self._next_input[index]
        # Columns that are padding for every remaining row are dead weight: trim them.
        width = int(self._attention.sum(-1).max())
        self._attention = self._attention[:, -width:]
        for layer in self._cache.layers:
            layer.keys = layer.keys[index, :, -width:]
            layer.values = layer.values[index, :, -width:]


def _left_pad(tensor: torch.Tensor, width: int, dim: int = 2) -> torch.Tensor:
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)
