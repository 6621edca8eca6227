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

import os

import torch

from rollverify.rollout.engines.weight_group import spec

DISABLE_ENV = "ROLLVERIFY_VLLM_KEEP_PREPACKING"  # set to 1 to leave vLLM's packing on


def disable_cpu_weight_prepacking() -> None:
    """vllm.general_plugins entry point: route CPU linears to torch.nn.functional.linear."""
    if os.environ.get(DISABLE_ENV) == "1":
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    import vllm._custom_ops as ops
    import vllm.model_executor.layers.utils as layer_utils

    ops._supports_onednn = False
    layer_utils.check_cpu_sgl_kernel = lambda n, k, dtype: False


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


class WeightSyncExtension:
    """Methods vLLM mixes into its workers (parallel_config.worker_extension_cls); the sidecar
    calls them through `collective_rpc`. Weights come as packed bytes through Ray's object
    store (rollverify_load_weights) or, tensor by tensor, over a broadcast from the trainer
    (rollverify_join_weight_group, then rollverify_receive_weights at each sync)."""

    def rollverify_load_weights(self, packed: list) -> int:
        """Load trainer weights (HF names, packed by pack_tensors) into the running model."""
        model = self.model_runner.model
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
        model = self.model_runner.model
        device = next(model.parameters()).device
        landing = weight_group.device_for(kind, device)

        def arriving():  # each tensor as the loader asks for it (one load: it checks ties)
            for name, dtype, shape in specs:
                tensor = torch.empty(shape, dtype=getattr(torch, dtype), device=landing)
                yield name, weight_group.broadcast(group, tensor).to(device)

        model.load_weights(arriving())
        return len(specs)

    def rollverify_prepacking_disabled(self) -> bool:
        import vllm._custom_ops as ops

        return not ops._supports_onednn
