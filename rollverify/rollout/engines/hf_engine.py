"""In-process rollout engine on transformers: continuous batching over a fixed number of slots.

Each `poll()` is one engine step: every running trajectory decodes one token, then free slots
take queued trajectories at once (their prefill yields their first token). Admitted rows are
prefilled in groups of similar length (engines/batching.py), each group left-padded to its
longest. Running rows are kept in bands of similar length (engines/banded_kv.py), so a short
row never attends to a long row's padding. Rows that finish and rows that join are applied in
one rebuild per step, which bands the rows again. Everything is synchronous and seeded, so a
run is reproducible on CPU, pauses included.

Sampling is from the softmax at `temperature`, truncated by `top_k`/`top_p` where set; the
behavior log-prob of a token is log_softmax(logits / temperature) untruncated, the quantity
TRL's loss recomputes (rollverify/core/sampling.py says why).
"""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, DynamicLayer

from rollverify.core.sampling import Sampling
from rollverify.cost.trace import EngineStep
from rollverify.infra.kill_points import kill_point
from rollverify.rollout.engines.banded_kv import GQA_ATTENTION, left_pad, reband
from rollverify.rollout.engines.batching import length_groups
from rollverify.rollout.engines.protocol import EngineStats, QueuedSlots, probe_logprobs_of
from rollverify.rollout.trajectory import Trajectory


@dataclass
class _Row:
    """A running trajectory. New tokens wait in lists and join the trajectory when it stops."""

    trajectory: Trajectory
    length: int  # tokens of this row in the KV cache
    next_token: int = -1  # sampled, not yet fed to the model
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def generated(self) -> int:
        return len(self.trajectory) + len(self.tokens)

    def flush(self, version: int) -> int:
        """Move the generated tokens into the trajectory; returns how many were regenerated."""
        regenerated = self.trajectory.extend(self.tokens, self.logprobs, version)
        self.tokens, self.logprobs = [], []
        return regenerated


class HFEngine(QueuedSlots):
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
        top_p: float = 1.0,
        top_k: int = 0,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        stop_token_ids: tuple[int, ...] = (),
    ) -> None:
        self.device = torch.device(device) if device is not None else model.device
        # The engine's own copy of the weights, synced by load_weights like a real sidecar's,
        # in the dtype it serves (model.dtype: bfloat16 beside float32 master weights).
        self.model = copy.deepcopy(model).to(self.device, dtype=dtype).eval().requires_grad_(False)
        self.model.set_attn_implementation(GQA_ATTENTION)
        self.slots = slots
        self.admit_batch = max(1, slots // 8)
        self.max_new_tokens = max_new_tokens
        # end of sequence and the tokens a row also stops at (a tool call's closing marker):
        # finish reason "stop"
        self.stop_token_ids = frozenset((eos_token_id, *stop_token_ids))
        self.pad_token_id = pad_token_id
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.version = version
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.stats = EngineStats()
        self._queue: deque[Trajectory] = deque()
        self._rows: list[_Row] = []  # running, in cache row order
        self._cache: Cache | None = None
        self._masks: list[torch.Tensor | None] = []  # per band, this step's (the layers share it)
        self._trace: list[EngineStep] = []  # one per poll, for the cost model

    # -- the engine interface ---------------------------------------------------------------

    def start(self) -> dict:
        return {"seconds": 0.0}  # in-process: nothing to start

    def shutdown(self) -> None:
        pass

    @torch.no_grad()
    def poll(self) -> list[Trajectory]:
        started = time.perf_counter()
        decoded = (len(self._rows), sum(row.length + 1 for row in self._rows))  # rows, context
        # positions attended, padding included: each band's rows x its width (+ this token)
        layer = self._cache.layers[0] if self._rows else None
        padded = (
            sum(n * (w + 1) for n, w in zip(layer.sizes, layer.widths, strict=True)) if layer else 0
        )
        done = self._decode() if self._rows else []
        finished = [self._flush(self._rows[i]) for i in done]
        free = self.slots - (len(self._rows) - len(done))
        # A prefill is a forward pass of its own, with a fixed cost of its own (prefill_overhead
        # in benchmarks/results/cost_model_bench_hf.json): admit in batches of slots/8 rather
        # than one row per step.
        batch = min(free, len(self._queue))
        wanted = min(self.admit_batch, len(self._queue))
        admit = batch >= wanted or len(self._rows) == len(done)
        admitted = [self._queue.popleft() for _ in range(batch if admit else 0)]
        new_rows, new_kv, prefill_padded = self._prefill(admitted) if admitted else ([], [], 0)
        prefilled = [row.length for row in new_rows]
        new_done = [i for i, row in enumerate(new_rows) if self._finished(row)]
        finished += [self._flush(new_rows[i]) for i in new_done]
        keep = [i for i in range(len(self._rows)) if i not in set(done)]
        self._rebuild(keep, new_rows, new_kv, new_done)
        self._trace.append(
            EngineStep(
                *decoded,
                len(prefilled),
                sum(prefilled),
                sum(n * (n + 1) // 2 for n in prefilled),
                decode_padded=padded,
                seconds=time.perf_counter() - started,  # the whole poll: rebuilding KV too
                prefill_padded=prefill_padded,
            )
        )
        return finished

    def pause(self) -> list[Trajectory]:
        paused = [self._flush(row) for row in self._rows] + list(self._queue)
        self.stats.aborted += len(paused)
        self._queue.clear()
        self._rows, self._cache = [], None
        return paused

    def _flush(self, row: _Row) -> Trajectory:
        self.stats.tokens_regenerated += row.flush(self.version)
        return row.trajectory

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        if self.has_work:
            raise RuntimeError("pause the engine before loading weights: in-flight KV is stale")
        self._load(named_tensors)
        self.version = version

    def load_weights_in_flight(
        self,
        named_tensors: Iterable[tuple[str, torch.Tensor]],
        version: int,
        recompute_kv: bool = True,
    ) -> None:
        """Asynchronous training: new weights while sequences run. Every running row stops at
        this token boundary; what it generated keeps the version that sampled it. With
        `recompute_kv` the rows go back to the front of the queue and the next poll prefills
        their prompt and tokens again under the new weights (as a resumed trajectory is);
        without, they continue on the KV cache the old weights computed (PipelineRL's choice)."""
        running = [self._flush(row) for row in self._rows]
        if recompute_kv:
            self._rows, self._cache = [], None
            self._queue.extendleft(reversed(running))
            self.stats.tokens_recomputed_on_update += sum(t.context_length for t in running)
        kill_point("weights-in-flight", version)  # tests: the rows stopped, the weights not here
        self._load(named_tensors)
        self.version = version

    def _load(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        state = dict(named_tensors)
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
            raise ValueError(
                f"weights do not fit the engine's model: missing {missing}, unexpected {unexpected}"
            )

    def probe_logprobs(self, token_ids: list[int]) -> torch.Tensor:
        return probe_logprobs_of(self.model, token_ids)[None]

    @contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        training, stats = self.generator, self.stats
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.stats = EngineStats()
        try:
            yield
        finally:
            self.generator, self.stats = training, stats

    def reset_stats(self) -> None:
        self.stats = EngineStats()

    def take_trace(self) -> list[EngineStep]:
        trace, self._trace = self._trace, []
        return trace

    def sampling_state(self) -> torch.Tensor:
        return self.generator.get_state()

    def load_sampling_state(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)

    # -- one step -----------------------------------------------------------------------------

    def _decode(self) -> list[int]:
        """Feed every running row its sampled token, sample the next; rows that finished."""
        rows, layer = self._rows, self._cache.layers[0]
        lengths = torch.tensor([row.length for row in rows], device=self.device)
        self._masks[:], start = [], 0
        for size, width in zip(layer.sizes, layer.widths, strict=True):
            band = lengths[start : start + size]
            columns = torch.arange(width + 1, device=self.device)  # + this step's token
            unpadded = bool((band == width).all())  # (SDPA is faster without a mask)
            self._masks.append(
                None if unpadded else (columns >= width - band[:, None])[:, None, None]
            )
            start += size
        out = self.model(
            input_ids=torch.tensor([[row.next_token] for row in rows], device=self.device),
            position_ids=lengths[:, None],
            past_key_values=self._cache,
            use_cache=True,
        )
        for row in rows:
            row.length += 1
        self.stats.decode_steps += 1
        self.stats.slot_steps_busy += len(rows)
        self._sample(out.logits[:, -1, :], rows)
        return [i for i, row in enumerate(rows) if self._finished(row)]

    def _prefill(self, trajectories: list[Trajectory]) -> tuple[list[_Row], list, int]:
        """Prefill prompt + kept prefix of new rows, grouped by length (engines/batching.py),
        and sample their next tokens in admission order. Returns the rows, each layer's
        (keys, values) for them left-padded to one width, and the positions computed."""
        contexts = [torch.cat([t.prompt_ids, t.token_ids]) for t in trajectories]
        lengths = [len(c) for c in contexts]
        width, last_logits, parts, padded = max(lengths), [None] * len(contexts), [], 0
        for group in length_groups(lengths):
            logits, cache = self._forward_left_padded([contexts[i] for i in group])
            for i, row_logits in zip(group, logits, strict=True):
                last_logits[i] = row_logits
            parts.append((group, cache))
            padded += len(group) * lengths[group[0]]
        rows = [_Row(t, length=n) for t, n in zip(trajectories, lengths, strict=True)]
        self._sample(torch.stack(last_logits), rows)
        order = [i for group, _ in parts for i in group]
        back = torch.tensor(sorted(range(len(order)), key=order.__getitem__))  # admission order
        layers = []
        for per_group in zip(*(cache.layers for _, cache in parts), strict=True):
            if any(type(layer) is not DynamicLayer for layer in per_group):
                # Sliding-window or hybrid layers keep state this row surgery does not maintain.
                raise NotImplementedError("the hf engine supports full-attention models only")
            keys = torch.cat([left_pad(layer.keys, width) for layer in per_group])
            values = torch.cat([left_pad(layer.values, width) for layer in per_group])
            layers.append((keys[back], values[back]))
        return rows, layers, padded

    def _forward_left_padded(self, contexts: list[torch.Tensor]) -> tuple[torch.Tensor, Cache]:
        """One forward over left-padded contexts: each row's last logits, and the KV cache."""
        width = max(len(c) for c in contexts)
        input_ids = torch.full((len(contexts), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(contexts), width), dtype=torch.long)
        for i, context in enumerate(contexts):
            input_ids[i, width - len(context) :] = context
            attention[i, width - len(context) :] = 1
        attention = attention.to(self.device)
        out = self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=attention,
            position_ids=(attention.cumsum(-1) - 1).clamp(min=0),
            use_cache=True,
        )
        self.stats.tokens_prefilled += int(attention.sum())
        return out.logits[:, -1, :], out.past_key_values

    def _sample(self, logits: torch.Tensor, rows: list[_Row]) -> None:
        logprobs = torch.log_softmax(logits.float() / self.temperature, dim=-1)
        allowed = Sampling(self.temperature, self.top_p, self.top_k).allowed(logprobs)
        tokens = torch.multinomial(allowed.exp(), 1, generator=self.generator)
        chosen = logprobs.gather(1, tokens).squeeze(1).tolist()
        for row, token, logprob in zip(rows, tokens.squeeze(1).tolist(), chosen, strict=True):
            row.next_token = token
            row.tokens.append(token)
            row.logprobs.append(logprob)
        self.stats.tokens_generated += len(rows)

    def _finished(self, row: _Row) -> bool:
        if row.next_token in self.stop_token_ids:
            row.trajectory.finish_reason = "stop"
        elif row.generated() >= self.max_new_tokens:
            row.trajectory.finish_reason = "length"
        return row.trajectory.finish_reason is not None

    # -- the shared left-padded KV cache ------------------------------------------------------

    def _rebuild(
        self, keep: list[int], new_rows: list[_Row], new_kv: list, new_done: list[int]
    ) -> None:
        """Drop finished rows, add new unfinished ones, and band the rows again by length: the
        rows' KV is gathered into new blocks, each as wide as its longest row, never wider.
        new_kv: each layer's (keys, values) of the new rows."""
        joining = [i for i in range(len(new_rows)) if i not in set(new_done)]
        if len(keep) == len(self._rows) and not joining:
            return
        rows = [self._rows[i] for i in keep] + [new_rows[i] for i in joining]
        if not rows:
            self._rows, self._cache = [], None
            return
        old = self._cache.layers if self._cache is not None else []
        # Where each row's KV is: (band, index) in the old cache; new rows after the old bands.
        located = [
            (band, i) for band, size in enumerate(old[0].sizes if old else []) for i in range(size)
        ]
        fresh = len(old[0].sizes) if old else 0
        where = [located[i] for i in keep] + [(fresh, j) for j in joining]
        lengths = [r.length for r in rows]
        order, layers = reband(old, lengths, where, fresh, new_kv, self._masks, self.device)
        self._rows = [rows[i] for i in order]
        self._cache = Cache(layers=layers)
