"""What the two simulated engines share: the engine interface's parts that a model would do
(there is none), and what both are built from (engines/simulated.py, the Python reference;
engines/simulated_compiled.py, the same model compiled)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from rollverify.cost.tool_latency import ToolCallSampler
from rollverify.cost.trace import EngineStep
from rollverify.infra.vllm_versions import default_block_size


class NoModel:
    """The engine interface's parts that a model would do, on an engine without one."""

    step: int

    def start(self) -> dict:
        return {"seconds": 0.0}

    def shutdown(self) -> None:
        pass

    def probe_logprobs(self, token_ids: list[int]) -> torch.Tensor:
        return torch.zeros(1, max(0, len(token_ids) - 1))  # no model: nothing to disagree with

    def take_trace(self) -> list[EngineStep]:
        return []  # the clock is the price: nothing to trace

    def sampling_state(self) -> torch.Tensor:
        return torch.tensor([self.step])

    def load_sampling_state(self, state: torch.Tensor) -> None:
        pass  # lengths come from `lengths`, not from a random stream

    @contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        yield


class SimulatedBase(NoModel):
    """A simulated engine, built from its settings: `cost` prices each iteration (Pricing, a
    GPU; the reference also takes a fitted StepCost), `slots` rows, responses of up to
    `max_new_tokens`, each as long as `lengths(group_id, sample_index)` draws; admission in
    batches of `admit_batch` (default: as the hf engine), `finishes_per_poll` finishes a poll
    (engines/simulated.py says what it trades), the policy `version` it starts at, a KV cache
    of `kv_tokens` (None: without limit) in blocks of `block_size`, and where responses call a
    tool (`tool_calls`, cost/tool_latency.py; None: never). Sampling settings are a model's:
    the defaults. Each engine sets up its own state in `_start`."""

    def __init__(
        self,
        cost,
        slots: int,
        max_new_tokens: int,
        lengths: Callable[[int, int], int],
        admit_batch: int | None = None,
        finishes_per_poll: int = 1,
        version: int = 0,
        kv_tokens: int | None = None,
        block_size: int | None = None,
        tool_calls: ToolCallSampler | None = None,
    ) -> None:
        self.cost = cost
        self.slots = slots
        self.max_new_tokens = max_new_tokens
        self.temperature, self.top_p, self.top_k = 1.0, 1.0, 0
        self.lengths = lengths
        self.admit_batch = admit_batch or max(1, slots // 8)  # as the hf engine
        self.finishes_per_poll = finishes_per_poll
        # KV blocks: None is a cache without limit (today's engines up to their slots)
        block_size = block_size or default_block_size()  # None: vLLM's, as vLLM picks it
        self.kv_blocks = None if kv_tokens is None else kv_tokens // block_size
        self.block_size = block_size
        self.tool_calls = tool_calls  # where responses call a tool
        self.idle_seconds = 0.0  # virtual seconds waiting for weights (asynchronous training)
        self.calls_made = 0  # tool calls the responses made
        self.tool_wait_seconds = 0.0  # idle: every response was waiting for a tool
        self._start(version)

    def _start(self, version: int) -> None:
        """The engine's own state, empty, at policy `version`."""
        raise NotImplementedError
