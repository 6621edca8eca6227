"""One rank of test_sharding.py's world (torchrun, 2 processes, gloo): the embedded default
model sharded with FSDP2 as accelerate shards it (each decoder layer, then the root), beside
an unsharded copy on every rank, trained one AdamW step on the same batch; rank 0 writes
what sharding.py's gathers gave against the copy as JSON to argv[1]. Also World.score's
split of rank 0's items (training/world.py), scored through the shards."""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM

from rollverify.config import load_config
from rollverify.engines.protocol import probe_logprobs_of
from rollverify.training.sharding import (
    full_optimizer_state,
    full_tensors,
    is_sharded,
    load_full_optimizer_state,
)
from rollverify.training.world import World


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


def main() -> None:
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    path = load_config().model_path()

    def load() -> torch.nn.Module:  # (a deepcopy of a model would not shard as loaded)
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)

    reference = load()
    sharded = shard(load())
    whole_before = dict(full_tensors(sharded))
    result = {
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
    state = full_optimizer_state(sharded, sharded_optimizer)
    shared = [state]
    dist.broadcast_object_list(shared, src=0)  # every rank reads the checkpoint's copy
    state = shared[0]
    expected = reference_optimizer.state_dict()
    result["optimizer_indexes_equal"] = sorted(state["state"]) == sorted(expected["state"])
    result["optimizer_gap"] = max(
        (state["state"][i][key] - expected["state"][i][key]).abs().max().item()
        for i in expected["state"]
        for key in ("exp_avg", "exp_avg_sq")
    )
    result["param_groups_equal"] = [g["params"] for g in state["param_groups"]] == [
        g["params"] for g in expected["param_groups"]
    ]
    # back into a fresh sharded copy: its gathered state is the one saved
    fresh = shard(load())
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    load_full_optimizer_state(fresh, fresh_optimizer, state)
    again = full_optimizer_state(fresh, fresh_optimizer)
    result |= split_scoring(sharded, rank, size, vocab)
    if rank == 0:
        result["optimizer_roundtrip_gap"] = max(
            (again["state"][i][key] - state["state"][i][key]).abs().max().item()
            for i in state["state"]
            for key in ("exp_avg", "exp_avg_sq")
        )
        with open(sys.argv[1], "w") as handle:
            json.dump(result, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
