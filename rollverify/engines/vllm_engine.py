"""The rollout engine protocol over N vLLM sidecars (Ray actors), with checked weight sync.

Requests go to the least-loaded sidecar. A trajectory resumes by re-submitting prompt + its
kept tokens as the prompt, with the rest of its token budget. Each request samples with its
own seed (vLLM per-request generators), derived from the engine seed and a counter.

Weight sync: the trainer's tensors travel through Ray's object store into each sidecar, which
loads them into the running model (vllm_plugin.WeightSyncExtension) and drops its prefix cache.
Then the engine scores a fixed probe sequence; its log-probs must match the trainer's within
`vllm.sync_check_tolerance` or the run stops (training/loop.py, SyncCheckError) rather than
train on a policy the engine does not have.

A sidecar that dies (its actor or its engine core), or stops answering polls for
SIDECAR_TIMEOUT_S, is replaced: a new actor starts, takes the last synced weights (kept in
Ray's object store: one copy of the weights in host shared memory) and the trajectories that
were in flight on the dead one resume from the tokens they had when submitted. At most
MAX_RESTARTS per engine: a sidecar that keeps dying stops the run instead of looping.
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


SIDECAR_TIMEOUT_S = 300.0  # a poll or an abort answers in milliseconds when the sidecar is well
MAX_RESTARTS = 3


class SidecarFailed(RuntimeError):
    """A sidecar died more often than MAX_RESTARTS."""

    exit_code = 1


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
        self._requests = 0  # requests submitted: with the seed, the next request's seed
        self._actors: list[Any] = []
        self._inflight: dict[str, tuple[Trajectory, int]] = {}  # request id -> (trajectory, actor)
        self._load = [0] * settings.engines
        self._busy = [0.0] * settings.engines
        self._ids = itertools.count()
        self._leftovers: dict[int, list[str]] = {}  # sidecar -> its /dev/shm blocks
        self.restarts = 0
        self._dead: set[int] = set()  # sidecars found dead, replaced before their next use
        self._weights: Any = None  # ObjectRef of the last synced weights, for restarts

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        import ray

        self._actors = [self._new_actor(i) for i in range(self.settings.engines)]
        reports = ray.get([actor.start.remote() for actor in self._actors])
        for index, report in enumerate(reports):
            self._check_started(index, report)
        return {"seconds": max(r["seconds"] for r in reports), "engines": len(self._actors)}

    def _new_actor(self, index: int) -> Any:
        from rollverify.engines.ray_runtime import sidecar_class

        kwargs = self.settings.engine_kwargs(self.seed + index)
        return sidecar_class(self.settings).remote(kwargs, self.settings.environment())

    def _check_started(self, index: int, report: dict[str, Any]) -> None:
        if report["host"] == socket.gethostname():
            self._leftovers[index] = report["shared_memory"]
        if not all(report["prepacking_disabled"]) and self._on_cpu():
            self.shutdown()
            raise RuntimeError(
                "vLLM CPU weight packing is on in a sidecar: weight sync would "
                "be wrong; is rollverify installed (its vllm plugin entry point)?"
            )

    def _orphans(self, index: int, error: Exception) -> list[Trajectory]:
        """Sidecar `index` is dead: mark it, return the trajectories that were in flight on it
        (with the tokens they had when submitted; what it generated since is lost)."""
        if self.restarts + len(self._dead) >= MAX_RESTARTS:
            raise SidecarFailed(
                f"vLLM sidecar {index} failed after {self.restarts} restarts ({error}); "
                "check the engine's log above"
            ) from error
        self._dead.add(index)
        lost = [rid for rid, (_, a) in self._inflight.items() if a == index]
        self._load[index] = 0
        return [self._inflight.pop(rid)[0] for rid in lost]

    def _revive(self) -> None:
        """Replace dead sidecars: a new actor with the last synced weights."""
        import ray

        for index in sorted(self._dead):
            with contextlib.suppress(Exception):
                ray.kill(self._actors[index])
            unlink_shared_memory(self._leftovers.pop(index, []))  # the dead engine's buffers
            actor = self._new_actor(index)
            self._check_started(index, ray.get(actor.start.remote()))
            if self._weights is not None:
                ray.get(actor.load_weights.remote(self._weights))
            self._actors[index] = actor
            self._dead.discard(index)
            self.restarts += 1
            self.stats.restarts += 1

    def _gather(self, refs: list[Any], timeout: float) -> list[tuple[Any, Exception | None]]:
        """Each sidecar's answer, or the error that says it is dead or hung."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        results = []
        for ref in refs:
            try:
                results.append((ray.get(ref, timeout=timeout), None))
            except (RayActorError, RayTaskError, GetTimeoutError) as error:
                results.append((None, error))
        return results

    def shutdown(self) -> None:
        import ray

        for actor in self._actors:
            with contextlib.suppress(Exception):  # a dead actor is what we want anyway
                ray.get(actor.shutdown.remote(), timeout=30)
            with contextlib.suppress(Exception):
                ray.kill(actor)
        self._actors, self._weights, self._dead = [], None, set()
        for blocks in self._leftovers.values():  # what a sidecar killed mid-shutdown left behind
            unlink_shared_memory(blocks)
        self._leftovers = {}

    def _on_cpu(self) -> bool:
        return not torch.cuda.is_available()

    # -- the engine interface -----------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return bool(self._inflight)

    def idle_slots(self) -> int:
        return max(0, self.slots - len(self._inflight))

    def submit(self, trajectories: list[Trajectory]) -> None:
        self._revive()
        batches: dict[int, list] = {}
        for trajectory in trajectories:
            if trajectory.finished:
                raise ValueError(f"trajectory {trajectory.key} is finished; submit unfinished ones")
            actor = min(range(len(self._actors)), key=lambda a: self._load[a])
            request_id = f"r{next(self._ids)}"
            prompt = torch.cat([trajectory.prompt_ids, trajectory.token_ids]).tolist()
            budget = self.max_new_tokens - len(trajectory)
            seed = (self.seed * 1_000_003 + self._requests) % (2**31)
            self._requests += 1
            batches.setdefault(actor, []).append((request_id, prompt, budget, seed))
            self._inflight[request_id] = (trajectory, actor)
            self._load[actor] += 1
        refs = [self._actors[a].add.remote(batch, self.temperature) for a, batch in batches.items()]
        lost = []
        for actor, (_, error) in zip(batches, self._gather(refs, SIDECAR_TIMEOUT_S), strict=True):
            if error is not None:
                lost += self._orphans(actor, error)
        if lost:
            self.submit(lost)

    def poll(self, wait_seconds: float = 0.02) -> list[Trajectory]:
        refs = [actor.poll.remote(wait_seconds) for actor in self._actors]
        finished, lost = [], []
        for actor, (report, error) in enumerate(self._gather(refs, SIDECAR_TIMEOUT_S)):
            if error is not None:  # dead: a new sidecar continues what it was generating
                lost += self._orphans(actor, error)
                continue
            self._busy[actor] = report["busy_seconds"]
            for record in report["finished"]:
                finished.append(self._absorb(record))
        if lost:
            self.submit(lost)
        self.stats.decode_steps += 1
        return finished

    def pause(self) -> list[Trajectory]:
        refs = [actor.abort_all.remote() for actor in self._actors]
        paused = []
        # An abort takes milliseconds; a sidecar that does not answer in 60 s is taken for dead
        # (not restarted here: a pause may be the run stopping).
        for actor, (records, error) in enumerate(self._gather(refs, 60.0)):
            if error is not None:  # dead: its trajectories pause with what they had
                paused += self._orphans(actor, error)
                continue
            paused += [self._absorb(record) for record in records]
        self.stats.aborted += sum(not t.finished for t in paused)
        assert not self._inflight, "every request comes back from an abort"
        return paused

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        import ray

        if self.has_work:
            raise RuntimeError("pause the engine before loading weights: in-flight KV is stale")
        self._revive()
        weights = ray.put([(name, tensor.detach().cpu()) for name, tensor in named_tensors])
        ray.get([actor.load_weights.remote(weights) for actor in self._actors])
        self._weights, self.version = weights, version

    def probe_logprobs(self, token_ids: list[int]) -> torch.Tensor:
        """Each sidecar's log-probs of token_ids[1:] given the tokens before: float [E, T-1]."""
        import ray

        self._revive()
        rows = ray.get([actor.probe_logprobs.remote(token_ids) for actor in self._actors])
        return torch.tensor(rows)

    @contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        training = (self.seed, self._requests, self.stats)
        self.seed, self._requests, self.stats = seed, 0, EngineStats()
        try:
            yield
        finally:
            self.seed, self._requests, self.stats = training

    def reset_stats(self) -> None:
        self.stats = EngineStats()

    def sampling_state(self) -> torch.Tensor:
        return torch.tensor([self.seed, self._requests], dtype=torch.long)

    def load_sampling_state(self, state: torch.Tensor) -> None:
        self.seed, self._requests = (int(x) for x in state.tolist())

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
