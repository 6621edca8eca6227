"""Checkpoint folders: safetensors + JSON only (no pickle), written atomically, checksummed.

    <run>/checkpoints/step-000040/
        <name>.safetensors ...    groups of tensors (model, optimizer, rng, cache, ...)
        <name>.shards/            or a group each rank wrote its own part of (a sharded run:
                                  training/checkpoint/sharded.py): one safetensors file per
                                  rank, torch.distributed.checkpoint's Hugging Face format
                                  (each part's place in the whole in its header; no pickle)
        state.json                everything else (positions, monitor, ledger, run id, config)
        <name>.json ...           other JSON documents (trainer_state.json for transformers)
        manifest.json             sha256 and size of every file above; written last

A checkpoint is written into a temporary folder and renamed into place, so a reader sees a
whole checkpoint or none (a sharded run's ranks write their parts into rank 0's temporary
folder first: `begin`); a reader gets each group whole either way (`load`, `read_group`).
`latest` walks back from the newest and skips any whose files do not match their manifest
(truncated, corrupt, half-deleted), with a warning, so a run resumes from the last good one.
Only the newest `keep` are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from rollverify.infra.kill_points import kill_point

MANIFEST = "manifest.json"
STATE = "state.json"
SHARDS = ".shards"  # <group>.shards/: a group written by every rank, a part each
ALIASES = "aliases.json"  # in a shards folder: {alias: stored name} (tied weights)
_FORMAT = "rollverify.checkpoint/1"


@dataclass
class Checkpoint:
    step: int
    tensors: dict[str, dict[str, torch.Tensor]]  # group name -> named tensors
    state: dict[str, Any]  # JSON-able
    documents: dict[str, Any] = field(default_factory=dict)  # name -> JSON-able, <name>.json
    folder: Path | None = None  # where it was read from


def folder_for(root: Path, step: int) -> Path:
    return root / f"step-{step:06d}"


def begin(root: Path, step: int) -> Path:
    """A new temporary folder for the checkpoint of `step` (an earlier write that was killed
    is cleared away first); `save` fills it and renames it into place."""
    root.mkdir(parents=True, exist_ok=True)
    _recover(root)
    for leftover in root.glob(".tmp-step-*"):  # a write that was killed: never a checkpoint
        shutil.rmtree(leftover, ignore_errors=True)
    temporary = root / f".tmp-{folder_for(root, step).name}-{os.getpid()}"
    temporary.mkdir()
    return temporary


def save(root: Path, checkpoint: Checkpoint, keep: int = 3, temporary: Path | None = None) -> Path:
    """Write `checkpoint` under root atomically; prune to the newest `keep`; return its folder.
    temporary: begin()'s folder, already holding the groups the ranks wrote (else a new one)."""
    final = folder_for(root, checkpoint.step)
    temporary = temporary or begin(root, checkpoint.step)
    try:
        _write(temporary, checkpoint)
    except BaseException:  # a full disk, Ctrl-C: leave no half checkpoint behind
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    if final.exists():  # the same step again (a stop request after a periodic save)
        final.rename(root / f".tmp-old-{final.name}-{os.getpid()}")
    os.replace(temporary, final)
    for old in root.glob(f".tmp-old-{final.name}-*"):
        shutil.rmtree(old, ignore_errors=True)
    _prune(root, keep)
    return final


def _write(temporary: Path, checkpoint: Checkpoint) -> None:
    for group, tensors in checkpoint.tensors.items():
        unique, aliases = _without_aliases(tensors)
        save_file(unique, temporary / f"{group}.safetensors", {"aliases": json.dumps(aliases)})
    (temporary / STATE).write_text(json.dumps({"step": checkpoint.step, **checkpoint.state}))
    for name, document in checkpoint.documents.items():
        (temporary / f"{name}.json").write_text(json.dumps(document, indent=2))
    kill_point("checkpoint-write", checkpoint.step)  # tests: die with no manifest written
    files = sorted(p.relative_to(temporary).as_posix() for p in _files(temporary))
    manifest = {
        "format": _FORMAT,
        "step": checkpoint.step,
        "files": {name: _digest(temporary / name) for name in files},
    }
    (temporary / MANIFEST).write_text(json.dumps(manifest, indent=2))
    _fsync_tree(temporary)


def _recover(root: Path) -> None:
    """A save killed between moving an older copy of its step aside and renaming the new one
    into place leaves the older copy as .tmp-old-step-N-*: put it back."""
    for old in sorted(root.glob(".tmp-old-step-*")):
        final = root / old.name.removeprefix(".tmp-old-").rsplit("-", 1)[0]
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.rename(final)


def latest(root: Path) -> Checkpoint | None:
    """The newest checkpoint whose files match their manifest (warning about any skipped)."""
    if root.is_dir():
        _recover(root)
    for folder in sorted(root.glob("step-*"), reverse=True):
        problem = check(folder)
        if problem is None:
            return load(folder)
        warnings.warn(f"skipping checkpoint {folder}: {problem}", stacklevel=2)
    return None


def steps(root: Path) -> list[int]:
    """The steps of the checkpoints that have their manifest, oldest first (not checked)."""
    found = [p for p in root.glob("step-*") if (p / MANIFEST).is_file()]
    return sorted(int(p.name.removeprefix("step-")) for p in found)


def newest_step(root: Path) -> int | None:
    """The step of the newest checkpoint that has its manifest (not checked: for messages)."""
    return max(steps(root), default=None)


def newest_state(root: Path) -> tuple[int, dict[str, Any]] | None:
    """The step and state.json of the newest checkpoint whose state.json matches its
    manifest; its tensors are not read (a finished run's summary needs the state alone)."""
    if root.is_dir():
        _recover(root)
    for folder in sorted(root.glob("step-*"), reverse=True):
        if matches_manifest(folder, STATE) is None:
            state = json.loads((folder / STATE).read_text())
            return state.pop("step"), state
    return None


def matches_manifest(folder: Path, name: str) -> str | None:
    """None if the file `name` of a checkpoint matches its manifest entry; else what is
    wrong (a reader of one file need not hash the others)."""
    try:
        expected = json.loads((folder / MANIFEST).read_text())["files"][name]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"is not in a readable manifest ({error})"
    path = folder / name
    if not path.exists():
        return "is missing"
    if _digest(path) != expected:
        return "does not match its checksum (truncated or corrupt)"
    return None


def check(folder: Path) -> str | None:
    """None if the folder is a whole, unaltered checkpoint; else what is wrong."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as error:
        return f"no readable manifest ({error})"
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        return "not a rollverify checkpoint manifest"
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return "the manifest lists no files"
    for name, expected in files.items():
        path = folder / name
        if not path.exists():
            return f"{name} is missing"
        if _digest(path) != expected:
            return f"{name} does not match its checksum (truncated or corrupt)"
    return None


def load(folder: Path) -> Checkpoint:
    state = json.loads((folder / STATE).read_text())
    tensors = {p.stem: load_group(p) for p in sorted(folder.glob("*.safetensors"))}
    tensors |= {p.name.removesuffix(SHARDS): ShardedGroup(p) for p in _shard_folders(folder)}
    documents = {
        p.stem: json.loads(p.read_text())
        for p in sorted(folder.glob("*.json"))
        if p.name not in (STATE, MANIFEST)
    }
    return Checkpoint(state.pop("step"), tensors, state, documents, folder)


def read_group(folder: Path, group: str) -> dict[str, torch.Tensor]:
    """One group of a checkpoint, whole (from its file, or from every rank's part)."""
    shards = folder / f"{group}{SHARDS}"
    return load_shards(shards) if shards.is_dir() else load_group(folder / f"{group}.safetensors")


def group_files(folder: Path, group: str) -> list[str]:
    """The names (as the manifest has them) of the files that hold one group."""
    shards = folder / f"{group}{SHARDS}"
    if shards.is_dir():
        return sorted(p.relative_to(folder).as_posix() for p in _files(shards))
    return [f"{group}.safetensors"]


def load_shards(shards: Path) -> dict[str, torch.Tensor]:
    """A group every rank wrote a part of, put back whole in this process (no process group:
    torch.distributed.checkpoint reads each part into its place, as its headers say)."""
    with warnings.catch_warnings():  # (that it reads in one process, as asked)
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        tensors = _read_parts(shards, _whole_tensor, alone=True)
    aliases = shards / ALIASES
    names = json.loads(aliases.read_text()) if aliases.exists() else {}
    return tensors | {alias: tensors[name] for alias, name in names.items()}


Like = Callable[[str, torch.Size, torch.dtype], torch.Tensor]


def _whole_tensor(_: str, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype)


def _read_parts(shards: Path, like: Like, alone: bool) -> dict[str, torch.Tensor]:
    """Every tensor of a shards folder read into `like(name, whole shape, dtype)` by
    torch.distributed.checkpoint: a DTensor there gets this rank's part only. `alone`: by
    this process alone (no collective, even in a world of processes); else every rank at
    once."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    layout = HuggingFaceStorageReader(str(shards)).read_metadata().state_dict_metadata
    targets = {
        name: like(name, entry.size, entry.properties.dtype) for name, entry in layout.items()
    }
    dcp.load(targets, storage_reader=HuggingFaceStorageReader(str(shards)), no_dist=alone)
    return targets


class ShardedGroup(Mapping[str, torch.Tensor]):
    """A group every rank wrote a part of, read when first used: whole, as any group
    (load_shards), or by a sharded run's rank straight into its own parts (`parts`), so no
    rank holds the whole (at 8B, ~64 GB of AdamW moments)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._whole: dict[str, torch.Tensor] | None = None

    def _tensors(self) -> dict[str, torch.Tensor]:
        if self._whole is None:
            self._whole = load_shards(self.folder)
        return self._whole

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._tensors()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors())

    def __len__(self) -> int:
        return len(self._tensors())

    def parts(self, like: Like) -> dict[str, torch.Tensor]:
        """Every tensor of the group read into `like(name, whole shape, dtype)`: a DTensor
        there is filled with this rank's part only (a collective: every rank at once)."""
        return _read_parts(self.folder, like, alone=False)


def _shard_folders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob(f"*{SHARDS}") if p.is_dir())


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def _without_aliases(
    tensors: dict[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors that share memory (tied embeddings) are stored once; safetensors refuses
    aliases. Returns the unique tensors and {alias: stored name}."""
    unique: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    for name, tensor in tensors.items():
        tensor = tensor.detach()  # where it lives: tied weights share memory there, not on CPU
        view = (
            (
                tensor.untyped_storage().data_ptr(),
                tensor.storage_offset(),
                tensor.shape,
                tensor.stride(),
                tensor.dtype,
            )
            if tensor.numel()
            else None
        )
        if view is not None and view in seen:
            aliases[name] = seen[view]
            continue
        if view is not None:
            seen[view] = name
        unique[name] = tensor.cpu().contiguous()
    return unique, aliases


def load_group(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), framework="pt") as file:
        tensors = {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118
        aliases = json.loads((file.metadata() or {}).get("aliases", "{}"))
    return tensors | {alias: tensors[name] for alias, name in aliases.items()}


def _digest(path: Path) -> dict[str, Any]:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return {"sha256": sha.hexdigest(), "bytes": path.stat().st_size}


def _fsync_tree(folder: Path) -> None:
    for path in _files(folder):
        with path.open("rb") as handle:
            os.fsync(handle.fileno())
    for directory in [*_shard_folders(folder), folder]:
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _prune(root: Path, keep: int) -> None:
    for folder in sorted(root.glob("step-*"), reverse=True)[keep:]:
        shutil.rmtree(folder, ignore_errors=True)
