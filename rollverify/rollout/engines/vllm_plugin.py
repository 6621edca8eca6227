"""Loaded into every vLLM process (entry point `vllm.general_plugins`), and the worker extension
the sidecar uses to sync weights.

The trap this fixes: on CPU, vLLM packs each linear layer's weight once at load time (oneDNN
handle, or the SGL kernel's packed copy) and then *empties* `layer.weight`. A later
`load_weights` writes into the emptied parameter while the forward keeps reading the old packed
copy: weight sync silently does nothing. With packing off, every linear reads `layer.weight`,
so synced weights take effect (measured: the sync check in vllm_engine.py fails without this
plugin and passes with it). Cost: vLLM's packed GEMMs are faster for large models; on CPU we
sync weights every step, so correctness wins. GPUs are untouched.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import TYPE_CHECKING

import torch

from rollverify.infra.vllm_versions import VLLMAlternatives, VLLMName
from rollverify.rollout.engines.weight_group import spec

if TYPE_CHECKING:  # the vLLM types the code names (benchmarks/vllm_compat.py reads them)
    from vllm.v1.worker.worker_base import WorkerBase

DISABLE_ENV = "ROLLVERIFY_VLLM_KEEP_PREPACKING"  # set to 1 to leave vLLM's packing on

# Where vLLM keeps the flag that turns its CPU oneDNN packing on, newest first: vllm/_cpu_ops.py
# from 0.34, vllm/_custom_ops.py before. Setting it on a module that does not keep it changes
# nothing vLLM reads (benchmarks/vllm_compat.py checks that each checked vLLM has one of them).
ONEDNN_FLAG_HOMES: VLLMAlternatives = (
    "vllm._cpu_ops._supports_onednn",
    "vllm._custom_ops._supports_onednn",
)
SGL_KERNEL_CHECK: VLLMName = "vllm.model_executor.layers.utils.check_cpu_sgl_kernel"

# What the sidecar's check reads back from each worker (rollverify_prepacking)
PACKING_OFF, PACKING_ON, PACKING_UNKNOWN = "off", "on", "unknown"


def onednn_flag_home() -> ModuleType | None:
    """The vLLM module that keeps the oneDNN packing flag; None where none of its homes does."""
    for dotted in ONEDNN_FLAG_HOMES:
        module_name, flag = dotted.rsplit(".", 1)
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if hasattr(module, flag):
            return module
    return None


def on_cpu() -> bool:
    """Whether vLLM runs on a CPU here (its platform, as vLLM detected it)."""
    from vllm.platforms import current_platform
    from vllm.platforms.interface import Platform

    platform: Platform = current_platform
    return platform.is_cpu()


def _no_sgl_kernel(n: int, k: int, dtype: torch.dtype) -> bool:
    return False


def disable_cpu_weight_prepacking() -> None:
    """vllm.general_plugins entry point: route CPU linears to torch.nn.functional.linear.
    Off a CPU it does nothing; where this vLLM keeps its flag in none of ONEDNN_FLAG_HOMES it
    sets nothing, and the sidecar's check (rollverify_prepacking) stops the run."""
    if os.environ.get(DISABLE_ENV) == "1" or not on_cpu():
        return
    home = onednn_flag_home()
    module_name, check = SGL_KERNEL_CHECK.rsplit(".", 1)
    layer_utils = importlib.import_module(module_name)
    if home is None or not hasattr(layer_utils, check):
        return
    home._supports_onednn = False
    setattr(layer_utils, check, _no_sgl_kernel)


def prepacking_state() -> str:
    """PACKING_OFF where both of vLLM's CPU packings are off (the plugin ran), PACKING_ON where
    one is on, PACKING_UNKNOWN where this vLLM keeps the flag in none of its known homes."""
    home = onednn_flag_home()
    if home is None:
        return PACKING_UNKNOWN
    module_name, check = SGL_KERNEL_CHECK.rsplit(".", 1)
    sgl_off = getattr(importlib.import_module(module_name), check, None) is _no_sgl_kernel
    return PACKING_OFF if not home._supports_onednn and sgl_off else PACKING_ON


def pack_tensors(named_tensors) -> list[tuple[str, str, tuple[int, ...], bytes]]:
    """(name, dtype, shape, raw bytes) per tensor: plain data any RPC layer can pickle."""
    packed = []
    for name, tensor in named_tensors:
        tensor = tensor.detach().cpu().contiguous()
        raw = tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        packed.append((*spec(name, tensor), raw))
    return packed


def unpack_tensors(packed) -> list[tuple[str, torch.Tensor]]:
    out = []
    for name, dtype, shape, raw in packed:
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0)
        out.append((name, flat.view(getattr(torch, dtype)).reshape(shape)))
    return out


def _model(worker: WorkerBase) -> torch.nn.Module:
    """The model that vLLM's worker, which WeightSyncExtension is mixed into, runs."""
    return worker.model_runner.model


class WeightSyncExtension:
    """Methods vLLM mixes into its workers (parallel_config.worker_extension_cls); the sidecar
    calls them through `collective_rpc`. Weights come as packed bytes through Ray's object
    store (rollverify_load_weights) or, tensor by tensor, over a broadcast from the trainer
    (rollverify_join_weight_group, then rollverify_receive_weights at each sync)."""

    def rollverify_load_weights(self, packed: list) -> int:
        """Load trainer weights (HF names, packed by pack_tensors) into the running model."""
        model = _model(self)
        device = next(model.parameters()).device
        named_tensors = unpack_tensors(packed)
        model.load_weights((name, tensor.to(device)) for name, tensor in named_tensors)
        return len(named_tensors)

    def rollverify_join_weight_group(
        self, host: str, port: int, first_rank: int, world_size: int, kind: str
    ) -> int:
        """Join the trainer's weight group (weight_group.py) as rank first_rank + this
        worker's tensor-parallel rank; blocks until every member joined."""
        from vllm.distributed import get_tensor_model_parallel_rank

        from rollverify.rollout.engines import weight_group

        rank = first_rank + get_tensor_model_parallel_rank()
        self.rollverify_weight_group = (weight_group.join(host, port, rank, world_size, kind), kind)
        return rank

    def rollverify_receive_weights(self, specs: list[tuple[str, str, tuple[int, ...]]]) -> int:
        """Receive each (name, dtype, shape) of `specs` in turn from the trainer's broadcast
        and load it: one whole tensor at a time beside the model, never the model twice."""
        from rollverify.rollout.engines import weight_group

        group, kind = self.rollverify_weight_group
        model = _model(self)
        device = next(model.parameters()).device
        landing = weight_group.device_for(kind, device)

        def arriving():  # each tensor as the loader asks for it (one load: it checks ties)
            for name, dtype, shape in specs:
                tensor = torch.empty(shape, dtype=getattr(torch, dtype), device=landing)
                yield name, weight_group.broadcast(group, tensor).to(device)

        model.load_weights(arriving())
        return len(specs)

    def rollverify_prepacking(self) -> str:
        """This worker's CPU weight packing: prepacking_state()."""
        return prepacking_state()
