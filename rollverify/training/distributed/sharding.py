"""Sharded training (train.sharding: fsdp): FSDP2 through transformers' Trainer and accelerate.
Every rank holds 1/N of each parameter, its gradient and its AdamW moments (accelerate shards
CUDA devices only: on a CPU, train.sharding must be none). What needs whole tensors gathers
them here, one at a time, on every rank at the same moment (these are collectives):

    full_tensors(model)             the weights by name, each gathered in turn: the weight
                                    sync streams them to the engines
    load_optimizer_state(...)       AdamW's state, whole as a one-process run's
                                    optimizer.state_dict() gives it or in the parts a
                                    sharded checkpoint holds, back into every rank's shards
                                    (a resume)

On an unsharded model (one process, DDP) they cost nothing and take the tensors as they are,
so the sync and the resume have one code path. A checkpoint gathers nothing: each rank writes
its own part (training/checkpoint/sharded.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

# transformers' FSDP settings (TrainingArguments.fsdp_config): FSDP2, each decoder layer a
# unit (the model's _no_split_modules), parameters resharded after the forward.
FSDP_CONFIG = {
    "version": 2,
    "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "reshard_after_forward": True,
    "cpu_ram_efficient_loading": False,  # every rank loads the (resumed) weights itself
}


def is_sharded(model: torch.nn.Module) -> bool:
    return any(isinstance(m, FSDPModule) for m in model.modules())


def reshard(model: torch.nn.Module) -> None:
    """Every FSDP unit back to its shards. A forward without a backward (scoring, the probe)
    leaves the root's parameters gathered and registered in place of the sharded ones, which
    neither the state dict nor the optimizer's bookkeeping then find."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def full_tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, whole tensor) for the model's state dict, a sharded tensor gathered from every
    rank when reached: one whole tensor at a time beyond the shards."""
    reshard(model)
    for name, tensor in model.state_dict().items():
        yield name, tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def load_optimizer_state(
    model: torch.nn.Module, optimizer: Any, state: dict[str, Any], parts: bool = False
) -> None:
    """Put `state` back (optimizer.state_dict()'s form for the unsharded model: parameter
    indexes, whole tensors; or, `parts`, tensors sharded as the parameters, each rank's own
    part read): each rank keeps its shards. Unsharded: optimizer.load_state_dict."""
    if not is_sharded(model):
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    reshard(model)
    names = _parameter_names(model, optimizer)
    by_name = {
        "state": {names[i]: values for i, values in state["state"].items()},
        "param_groups": [
            group | {"params": [names[i] for i in group["params"]]}
            for group in state["param_groups"]
        ],
    }
    options = StateDictOptions(full_state_dict=not parts)
    set_optimizer_state_dict(model, optimizer, by_name, options=options)


def _parameter_names(model: torch.nn.Module, optimizer: Any) -> list[str]:
    """The name of each of the optimizer's parameters, in its order."""
    name_of = {id(p): n for n, p in model.named_parameters()}
    return [name_of[id(p)] for group in optimizer.param_groups for p in group["params"]]
