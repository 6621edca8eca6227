"""The rollout engine protocol over N vLLM sidecars (Ray actors), with checked weight sync.

Requests go to the least-loaded sidecar. A trajectory resumes by re-submitting prompt + its
kept tokens as the prompt, with the rest of its token budget. Each request samples with its
own seed (vLLM per-request generators), derived from the engine seed and a counter.

Weight sync: the trainer's tensors travel through Ray's object store into each sidecar, which
loads them into the running model (vllm_plugin.WeightSyncExtension) and drops its prefix cache.
Then the engine scores a fixed probe sequence; its log-probs must match the trainer's within
`vllm.sync_check_tolerance` or the run stops (training/loop.py, SyncCheckError) rather than
train on a policy the engine does not have.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from rollverify.engines.protocol import EngineStats
from rollverify.engines.vllm_sidecar import unlink_shared_memory
from rollverify.trajectory import Trajectory


@dataclass(frozen=True)
class VLLMSettings:
    """What each sidecar is started with (see rollverify.config.VLLMConfig)."""

    model: str
    dtype: str
    max_model_len: int
    slots_per_engine: int
    engines: int = 1
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    enforce_eager: bool = True
    enable_prefix_caching: bool = True
    cpu_kv_cache_gib: int = 1

    def environment(self) -> dict[str, str]:
        """Set in each sidecar before vLLM loads. On CPU, vLLM's automatic KV size and its
        OpenMP core binding made engine warm-up take ~45 s here (measured); a fixed KV size
        and no binding (the trainer shares the cores) take 0.5 s."""
        return {
            "VLLM_CPU_KVCACHE_SPACE": str(self.cpu_kv_cache_gib),
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "VLLM_LOGGING_LEVEL": "WARNING",
            "TOKENIZERS_PARALLELISM": "false",
        }

    def engine_kwargs(self, seed: int) -> dict[str, Any]:
        return {
            "model": self.model,
            "dtype": self.dtype,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.slots_per_engine,
            "seed": seed,
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enforce_eager": self.enforce_eager,
            "enable_prefix_caching": self.enable_prefix_caching,
            "worker_extension_cls": "rollverify.engines.vllm_plugin.WeightSyncExtension",
            # Sampled log-probs after temperature, as the trainer computes them (TRL divides
            # logits by the temperature); vLLM's default returns them before.
            "logprobs_mode": "processed_logprobs",
            "disable_log_stats": True,
        }


class VLLMEngine:
    """RolloutEngine over vLLM sidecars; `start` them first, `shutdown` when done."""

    def __init__(
        self,
        settings: VLLMSettings,
        max_new_tokens: int,
        temperature: float,
        seed: int = 0,
        version: int = 0,
    ) -> None:
        self.settings = settings
        self.slots = settings.slots_per_engine * settings.engines
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.version = version
        self.stats = EngineStats()
        self.seed = seed
        self._counter = itertools.count()
        self._actors: list[Any] = []
        self._inflight: dict[str, tuple[Trajectory, int]] = {}  # request id -> (trajectory, actor)
        self._load = [0] * settings.engines
        self._busy = [0.0] * settings.engines
        self._ids = itertools.count()
        self._leftovers: list[str] = []

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        import ray

        from rollverify.engines.ray_runtime import sidecar_class

        actor_class = sidecar_class(self.settings)
        env = self.settings.environment()
        self._actors = [
            actor_class.remote(self.settings.engine_kwargs(self.seed + i), env)
            for i in range(self.settings.engines)
        ]
        reports = ray.get([actor.start.remote() for actor in self._actors])
        here = socket.gethostname()
        self._leftovers = [p for r in reports if r["host"] == here for p in r["shared_memory"]]
        if not all(all(r["prepacking_disabled"]) for r in reports) and self._on_cpu():
            self.shutdown()
            raise RuntimeError(
                "vLLM CPU weight packing is on in a sidecar: weight sync would "
                "be wrong; is rollverify installed (its vllm plugin entry point)?"
            )
        return {"seconds": max(r["seconds"] for r in reports), "engines": len(self._actors)}

    def shutdown(self) -> None:
        import ray

        for actor in self._actors:
            with contextlib.suppress(Exception):  # a dead actor is what we want anyway
                ray.get(actor.shutdown.remote(), timeout=30)
            ray.kill(actor)
        self._actors = []
        unlink_shared_memory(self._leftovers)  # what a sidecar killed mid-shutdown left behind

    def _on_cpu(self) -> bool:
        return not torch.cuda.is_available()

    # -- the engine interface -----------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return bool(self._inflight)

    def idle_slots(self) -> int:
        return max(0, self.slots - len(self._inflight))

    def submit(self, trajectories: list[Trajectory]) -> None:
        import ray

        batches: dict[int, list] = {}
        for trajectory in trajectories:
            if trajectory.finished:
                raise ValueError(f"trajectory {trajectory.key} is finished; submit unfinished ones")
            actor = min(range(len(self._actors)), key=lambda a: self._load[a])
            request_id = f"r{next(self._ids)}"
            prompt = torch.cat([trajectory.prompt_ids, trajectory.token_ids]).tolist()
            budget = self.max_new_tokens - len(trajectory)
            seed = (self.seed * 1_000_003 + next(self._counter)) % (2**31)
            batches.setdefault(actor, []).append((request_id, prompt, budget, seed))
            self._inflight[request_id] = (trajectory, actor)
            self._load[actor] += 1
        ray.get(
            [self._actors[a].add.remote(batch, self.temperature) for a, batch in batches.items()]
        )

    def poll(self, wait_seconds: float = 0.02) -> list[Trajectory]:
        import ray

        reports = ray.get([actor.poll.remote(wait_seconds) for actor in self._actors])
        finished = []
        for actor, report in enumerate(reports):
            self._busy[actor] = report["busy_seconds"]
            for record in report["finished"]:
                finished.append(self._absorb(record))
        self.stats.decode_steps += 1
        return finished

    def pause(self) -> list[Trajectory]:
        import ray

        records = [
            r for batch in ray.get([a.abort_all.remote() for a in self._actors]) for r in batch
        ]
        paused = [self._absorb(record) for record in records]
        self.stats.aborted += sum(not t.finished for t in paused)
        assert not self._inflight, "every request comes back from an abort"
        return paused

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        import ray

        if self.has_work:
            raise RuntimeError("pause the engine before loading weights: in-flight KV is stale")
        weights = ray.put([(name, tensor.detach().cpu()) for name, tensor in named_tensors])
        ray.get([actor.load_weights.remote(weights) for actor in self._actors])
        self.version = version

    def probe_logprobs(self, token_ids: list[int]) -> torch.Tensor:
        """Each sidecar's log-probs of token_ids[1:] given the tokens before: float [E, T-1]."""
        import ray

        rows = ray.get([actor.probe_logprobs.remote(token_ids) for actor in self._actors])
        return torch.tensor(rows)

    @contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        training = (self.seed, self._counter, self.stats)
        self.seed, self._counter, self.stats = seed, itertools.count(), EngineStats()
        try:
            yield
        finally:
            self.seed, self._counter, self.stats = training

    def reset_stats(self) -> None:
        self.stats = EngineStats()

    def busy_slot_seconds(self) -> float:
        return sum(self._busy)

    # -- records back into trajectories ------------------------------------------------------

    def _absorb(self, record: dict[str, Any]) -> Trajectory:
        trajectory, actor = self._inflight.pop(record["request_id"])
        self._load[actor] -= 1
        self.stats.tokens_regenerated += trajectory.extend(
            record["tokens"], record["logprobs"], self.version
        )
        trajectory.finish_reason = record["finish_reason"]
        self.stats.tokens_generated += len(record["tokens"])
        return trajectory
