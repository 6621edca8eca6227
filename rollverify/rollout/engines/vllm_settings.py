"""What each vLLM sidecar is started with (VLLMSettings, from the config's vllm and rollout
sections: training/parts.py), how long starting one may take, and the error that stops a run
whose sidecars keep dying."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    block_size: int | None = None  # None: vLLM's default
    max_num_batched_tokens: int | None = None  # None: vLLM's default
    placement: str = "pack"  # the placement group's strategy: pack or spread
    node_resource: str | None = None  # a custom resource the engines' nodes have (None: any)
    node_lost_wait_seconds: float = 60.0  # a lost node's engines wait this long for one
    node_lost: str = "anywhere"  # then: anywhere (any node with room) or stop
    weight_sync: str = "collective"  # or object_store (weight_group.py)
    revision: str | None = None  # a hub model's (model.revision)
    engine_args: tuple[tuple[str, Any], ...] = ()  # vllm.engine_args, checked at config load

    def environment(self) -> dict[str, str]:
        """Set in each sidecar before vLLM loads. On CPU, vLLM's automatic KV size and its
        OpenMP core binding made engine warm-up slow; a fixed KV size and no binding (the
        trainer shares the cores) avoid both."""
        return {
            "VLLM_CPU_KVCACHE_SPACE": str(self.cpu_kv_cache_gib),
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "VLLM_LOGGING_LEVEL": "WARNING",
            "TOKENIZERS_PARALLELISM": "false",
        }

    def engine_kwargs(self, seed: int) -> dict[str, Any]:
        kwargs = {
            "model": self.model,
            "dtype": self.dtype,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.slots_per_engine,
            "seed": seed,
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enforce_eager": self.enforce_eager,
            "enable_prefix_caching": self.enable_prefix_caching,
            "worker_extension_cls": "rollverify.rollout.engines.vllm_plugin.WeightSyncExtension",
            # On, for the stat logger that traces each iteration (the cost model's input);
            # vLLM's own logging loggers stay off (VLLM_LOGGING_LEVEL=WARNING).
            "disable_log_stats": False,
        }
        return kwargs | dict(self.engine_args) | self._tensor_parallel() | self._set_only()

    def _set_only(self) -> dict[str, Any]:
        """What vLLM should pick itself unless the config says (its defaults differ by
        platform: a CPU's block size is not a GPU's)."""
        chosen = {
            "block_size": self.block_size,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "revision": self.revision,
        }
        return {k: v for k, v in chosen.items() if v is not None}

    def _tensor_parallel(self) -> dict[str, Any]:
        """An engine's tensor-parallel workers: processes beside its sidecar, on the GPUs of
        its bundle (one node). In a placement group vLLM would pick its Ray executor, which
        wants a bundle per GPU."""
        return {"distributed_executor_backend": "mp"} if self.tensor_parallel_size > 1 else {}


START_TIMEOUT_S = 900.0  # starting an engine and loading weights (an 8B model: minutes)


class SidecarFailed(RuntimeError):
    """A sidecar died more often than MAX_RESTARTS."""

    exit_code = 1
