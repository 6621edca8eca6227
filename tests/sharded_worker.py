"""One rank of test_sharding.py's world (torchrun, 2 processes, gloo): the embedded default
model sharded with FSDP2 as accelerate shards it (each decoder layer, then the root), beside
an unsharded copy on every rank, trained one AdamW step on the same batch; rank 0 writes
what sharding.py's gathers gave against the copy as JSON to argv[1]. A checkpoint of the
sharded model, each rank writing its part (training/checkpoint/sharded.py), goes into the run
folder argv[2] (with its config.yaml and the gathered weights, for `rvctl export`); read back and
put into fresh shards, then written again (in files of 256 KiB of whole tensors). Also
World.score's split of rank 0's items (training/distributed/world.py), scored through the shards."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace as Trainer

import torch
import torch.distributed as dist
import yaml
from safetensors.torch import save_file
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM

from rollverify.config import load_config
from rollverify.rollout.engines.protocol import probe_logprobs_of
from rollverify.training.checkpoint import sharded as sharded_parts
from rollverify.training.checkpoint.files import Checkpoint, folder_for, save
from rollverify.training.checkpoint.files import load as read_checkpoint
from rollverify.training.checkpoint.run_state import (
    _optimizer_parts,
    by_parameter,
    load_optimizer_and_scheduler,
    whole_state,
)
from rollverify.training.checkpoint.sharded import write_parts
from rollverify.training.distributed.sharding import full_tensors, is_sharded
from rollverify.training.distributed.world import World
from rollverify.training.weight_sync import WeightStream


def shard(model: torch.nn.Module) -> torch.nn.Module:
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def step(model, optimizer, ids: torch.Tensor) -> None:
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def gap(a: dict, b: dict) -> float:
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def split_scoring(model, rank: int, size: int, vocab: int) -> dict:
    """5 sequences of rank 0's scored by both ranks (3 + 2, the short part padded to 3): what
    each rank scored, and the whole against one pass over all 5."""
    rows = torch.randint(3, vocab, (5, 9), generator=torch.Generator().manual_seed(2))
    seen = []

    @torch.no_grad()
    def score(items: list) -> torch.Tensor:
        seen.append(len(items))
        return torch.stack([probe_logprobs_of(model, row.tolist()) for row in items])

    world = World(rank, size)
    scored = world.score(list(rows) if rank == 0 else None, score)
    counts = world.gather(seen[0])
    alone = score(list(rows))  # every rank: the same forward passes through the shards
    if rank != 0:
        return {}
    return {"scored_per_rank": counts, "split_gap": (scored - alone).abs().max().item()}


def checkpoint(run_dir: Path, step: int, model, optimizer, rank: int) -> Checkpoint:
    """A checkpoint as the training loop writes one for a sharded run (each rank its part
    into rank 0's new folder; rank 0 the rest, as run_state has it, and the manifest), read
    back by every rank."""
    world, root = World(rank, dist.get_world_size()), run_dir / "checkpoints"
    temporary = write_parts(world, root, step, model, optimizer)
    trainer = Trainer(
        accelerator=Trainer(unwrap_model=lambda m: m), model=model, optimizer=optimizer
    )
    whole = whole_state(trainer, [] if rank == 0 else None)
    if rank == 0:
        assert whole.weights is None, "a sharded run's rank 0 gathers no weights"
        rng = {"torch": torch.random.get_rng_state()}
        state = {"optimizer": _optimizer_parts(whole.optimizer)[1], "scheduler": {}}
        save(root, Checkpoint(step, {"rng": rng}, state), keep=5, temporary=temporary)
    dist.barrier()
    return read_checkpoint(folder_for(root, step))


def optimizer_state(saved: Checkpoint, optimizer) -> dict:
    """The checkpoint's optimizer tensors as optimizer.state_dict() of the unsharded model."""
    state = by_parameter(saved.tensors["optimizer"])
    return {"state": state, "param_groups": optimizer.state_dict()["param_groups"]}


class Scheduler:  # (the resume restores one; these runs have none)
    def load_state_dict(self, state: dict) -> None:
        assert state == {}


def main() -> None:
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    path = load_config().model_path()

    def load() -> torch.nn.Module:  # (a deepcopy of a model would not shard as loaded)
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)

    reference = load()
    sharded = load()
    first_sync = WeightStream(sharded, "bfloat16")  # a run's first sync: before the sharding
    shard(sharded)
    whole_before = dict(full_tensors(sharded))
    stream = WeightStream(sharded, "bfloat16")  # what the weight sync sends the engines
    sent = list(stream)  # (every rank: a collective per tensor)
    result = {
        # the specs of a broadcast are known before anything is gathered: whole shapes
        "stream_specs_match": stream.specs
        == [(n, str(t.dtype)[6:], tuple(t.shape)) for n, t in sent]
        and [n for n, _ in sent] == list(reference.state_dict())
        and all(t.dtype == torch.bfloat16 for _, t in sent),
        "stream_restartable": stream.restartable,
        "first_sync_restartable_once_sharded": first_sync.restartable,
        "reference_stream_restartable": WeightStream(reference, "bfloat16").restartable,
        "sharded": is_sharded(sharded),
        "reference_sharded": is_sharded(reference),
        "weights_gap_before": gap(whole_before, reference.state_dict()),
        "keys_equal": sorted(whole_before) == sorted(reference.state_dict()),
    }
    vocab = reference.config.vocab_size
    ids = torch.randint(3, vocab, (2 * size, 12), generator=torch.Generator().manual_seed(1))
    reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    sharded_optimizer = torch.optim.AdamW(sharded.parameters(), lr=1e-2)
    step(reference, reference_optimizer, ids)  # the whole batch here; a half on each rank:
    step(sharded, sharded_optimizer, ids[rank * 2 : rank * 2 + 2])  # FSDP averages them
    result["weights_gap_after_step"] = gap(dict(full_tensors(sharded)), reference.state_dict())
    probe = ids[0].tolist() + ids[1].tolist()
    result["probe_gap"] = (
        (probe_logprobs_of(sharded, probe) - probe_logprobs_of(reference, probe)).abs().max().item()
    )
    run_dir = Path(sys.argv[2])
    saved = checkpoint(run_dir, 1, sharded, sharded_optimizer, rank)
    whole = dict(full_tensors(sharded))  # (every rank: a collective)
    result["checkpoint_weights_gap"] = gap(saved.tensors["model"], whole)
    expected = reference_optimizer.state_dict()
    state = optimizer_state(saved, sharded_optimizer)
    result["optimizer_indexes_equal"] = sorted(state["state"]) == sorted(expected["state"])
    result["optimizer_gap"] = max(
        (state["state"][i][key] - expected["state"][i][key]).abs().max().item()
        for i in expected["state"]
        for key in ("exp_avg", "exp_avg_sq")
    )
    # back into fresh shards (a resume: each rank reads its own parts), then written again:
    # the same state
    fresh = shard(load())
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    resumed = read_checkpoint(folder_for(run_dir / "checkpoints", 1))
    load_optimizer_and_scheduler(fresh, fresh_optimizer, Scheduler(), resumed)
    result["resume_read_whole_moments"] = resumed.tensors["optimizer"]._whole is not None
    sharded_parts.FILE_BYTES = 1 << 18  # step 2's parts in several files per rank
    again = optimizer_state(checkpoint(run_dir, 2, fresh, fresh_optimizer, rank), fresh_optimizer)
    fresh_whole = dict(full_tensors(fresh))  # (every rank: a collective)
    result["optimizer_roundtrip_gap"] = max(
        (again["state"][i][key] - state["state"][i][key]).abs().max().item()
        for i in state["state"]
        for key in ("exp_avg", "exp_avg_sq", "step")
    )
    if rank == 0:
        (run_dir / "config.yaml").write_text(yaml.safe_dump(load_config().to_dict()))
        save_file(whole, str(run_dir / "gathered.safetensors"))
        save_file(fresh_whole, str(run_dir / "gathered-2.safetensors"))
    result |= split_scoring(sharded, rank, size, vocab)
    if rank == 0:
        with open(sys.argv[1], "w") as handle:
            json.dump(result, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
