"""A sharded run's checkpoint: each rank writes its own part of the weights and of AdamW's
moments, rank 0 the rest and the manifest last (checkpoint_files.save). Nothing is gathered:
at 8B, rank 0 would otherwise hold ~16 GB of weights and ~64 GB of fp32 moments at once.

    step-N/model.shards/shard-0000<r+1>-model-0000<f>-of-0000<F>.safetensors   rank r's part
    step-N/optimizer.shards/shard-0000<r+1>-model-0000<f>-of-0000<F>.safetensors  of file f

The files are torch.distributed.checkpoint's Hugging Face safetensors format, written with
`save_distributed`: each part's offset in the whole tensor is in its file's header, so no
metadata file is written (DCP's default one is a pickle). The names are those of the
one-process checkpoint (the model's state dict; `<index>.<key>` for the optimizer, in its
parameter order), so `checkpoint_files.load` reads either layout back into the same whole
groups: a resume, `rvctl export`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from rollverify.training.checkpoint.files import ALIASES, SHARDS, begin
from rollverify.training.distributed.sharding import is_sharded
from rollverify.training.distributed.world import World


def write_parts(
    world: World, root: Path, step: int, model: torch.nn.Module, optimizer: Any
) -> Path | None:
    """A sharded run: rank 0's new checkpoint folder for `step` under root, with every rank's
    parts written into it (checkpoint_files.save adds the rest). None for a run that is not
    sharded (rank 0 writes all of it). Every rank calls it at the same moment."""
    if not is_sharded(model):
        return None
    temporary, problem = None, None
    if world.main:
        try:
            temporary = begin(root, step)
        except OSError as error:
            problem = error
    temporary = world.broadcast(temporary)  # every rank writes there, or none does
    if temporary is None:
        raise problem or OSError(f"rank 0 could not make a checkpoint folder in {root}")
    _write_parts(temporary, model, optimizer, world.main)
    return temporary


def _write_parts(temporary: Path, model: torch.nn.Module, optimizer: Any, main: bool) -> None:
    """This rank's parts of the model and the optimizer state, into `temporary` (rank 0's
    checkpoint_files.begin() folder, on a filesystem every rank sees). A collective: every
    rank calls it at the same moment; a rank that fails to write fails it on every rank."""
    # (state_dict() reshards a unit a forward left gathered first: FSDP2's own hook)
    weights, aliases = _unaliased(model)
    _write(weights, temporary / f"model{SHARDS}")
    if main:
        (temporary / f"model{SHARDS}" / ALIASES).write_text(json.dumps(aliases))
    _write(_optimizer_tensors(optimizer), temporary / f"optimizer{SHARDS}")


# DCP's safetensors writer builds each file in memory before writing it: files of at most this
# many bytes of whole tensors (a rank's part is 1/N of it) bound what a write adds to a rank.
FILE_BYTES = 1 << 29


def _write(tensors: dict[str, torch.Tensor], folder: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    files = _file_indexes(tensors)
    writer = HuggingFaceStorageWriter(str(folder), files, save_distributed=True)
    dcp.save(tensors, storage_writer=writer)


def _file_indexes(tensors: dict[str, torch.Tensor]) -> dict[str, int]:
    """{name: file number, from 1}: the tensors in order, a new file when FILE_BYTES would be
    passed. From whole shapes (a DTensor's), so every rank numbers them alike."""
    number, filled, files = 1, 0, {}
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        if filled and filled + size > FILE_BYTES:
            number, filled = number + 1, 0
        files[name], filled = number, filled + size
    return files


def _unaliased(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The state dict with each tied parameter once (safetensors stores no shared memory),
    and {alias: stored name}. Tied by the module (one parameter under two names), so every
    rank drops the same names, even one whose part of the tensor is empty."""
    tensors = model.state_dict()
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in first:
            aliases[name] = first[id(parameter)]
            tensors.pop(name, None)
        else:
            first[id(parameter)] = name
    return tensors, aliases


def _optimizer_tensors(optimizer: Any) -> dict[str, torch.Tensor]:
    """AdamW's per-parameter tensors as `<index>.<key>` (indexes in the optimizer's order, as
    optimizer.state_dict() numbers them); a sharded parameter's moments are DTensors."""
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    return {
        f"{index}.{key}": value
        for index, parameter in enumerate(parameters)
        for key, value in optimizer.state.get(parameter, {}).items()
        if torch.is_tensor(value)
    }
