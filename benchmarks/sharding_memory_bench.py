"""Peak memory per rank with and without sharding, and of a checkpoint's write, on 2 processes.

    .venv/bin/python benchmarks/sharding_memory_bench.py [--layers 8] > result.json

accelerate shards CUDA devices only, so the Trainer cannot run FSDP here; this measures the
same FSDP2 wrapping (each decoder layer a unit, then the root: tests/sharded_worker.py) on a
2-process gloo world, directly: a Qwen3-architecture model of random weights (133M
parameters at the defaults, float32), one AdamW step on a small batch, then a checkpoint.

    none           every rank holds the whole model, its gradients and AdamW moments (DDP's
                   memory); rank 0 writes the checkpoint
    fsdp           each rank holds half of each; the checkpoint as the run writes it (each
                   rank its part, checkpoint/sharded.write_parts)
    fsdp-gathered  the same, the checkpoint written as before this change (the weights and
                   moments gathered whole to rank 0's memory, rank 0 writes them)

Figures are each rank's peak resident memory (VmHWM), reset before each phase, in MB: what
the process holds, torch and Python included (~0.5 GB before any model); `*_increase` is a
phase's peak over the memory held as it began. Each mode is its own launch (memory an
allocator kept from one phase would count in the next). Prints one JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RANK_FILE = "rank{rank}-{mode}.json"
MODES = ("none", "fsdp", "fsdp-gathered")


def peak_megabytes(field: str = "VmHWM") -> float:
    """This process's peak resident memory (VmHWM), or its resident memory now (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status (Linux only)")


def model_config(layers: int = 8):
    """A Qwen3-architecture model of 133M parameters at 8 layers (random weights)."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=64,
        tie_word_embeddings=True,
    )


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from now


def worker(mode: str, layers: int, out: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from transformers import Qwen3ForCausalLM

    from rollverify.training.checkpoint.files import Checkpoint, begin, save
    from rollverify.training.checkpoint.sharded import write_parts
    from rollverify.training.distributed.world import World

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    world, figures = World(rank, size), {"before_model": peak_megabytes()}
    torch.manual_seed(0)
    config = model_config(layers)
    reset_peak()
    model = Qwen3ForCausalLM(config)
    if mode.startswith("fsdp"):
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, (2, 64), generator=torch.Generator().manual_seed(1))
    model(input_ids=ids, labels=ids).loss.backward()
    if mode == "none":  # as DDP does: the gradients averaged
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
            parameter.grad /= size
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    figures["parameters"] = sum(p.numel() for p in model.parameters())  # (DTensors: whole)
    figures["train_step"] = peak_megabytes()
    root = out / f"checkpoints-{mode}"
    figures["before_write"] = peak_megabytes("VmRSS")
    reset_peak()
    if mode == "fsdp":
        temporary = write_parts(world, root, 1, model, optimizer)
        if rank == 0:
            rng = {"rng": {"torch": torch.random.get_rng_state()}}
            save(root, Checkpoint(1, rng, {}), 1, temporary)
        dist.barrier()
    elif mode == "fsdp-gathered":
        gathered_write(model, optimizer, root, rank)
    elif rank == 0:  # every rank holds it all: rank 0 writes what it holds
        tensors = {"model": model.state_dict(), "optimizer": _numbered(optimizer)}
        save(root, Checkpoint(1, tensors, {}), 1, begin(root, 1))
    dist.barrier()
    figures["checkpoint_write"] = peak_megabytes()
    figures["checkpoint_write_increase"] = figures["checkpoint_write"] - figures["before_write"]
    (out / RANK_FILE.format(rank=rank, mode=mode)).write_text(json.dumps(figures))
    dist.destroy_process_group()


def gathered_write(model, optimizer, root, rank: int) -> None:
    """The write before this session's change: every weight and moment gathered whole to rank
    0's CPU memory (torch's full state dict), then written by rank 0 alone."""
    import torch
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    from rollverify.training.checkpoint.files import Checkpoint, begin, save
    from rollverify.training.distributed.sharding import full_tensors

    weights = {name: tensor.cpu() for name, tensor in full_tensors(model)}
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    moments = get_optimizer_state_dict(model, optimizer, options=options)
    if rank == 0:
        flat = {
            f"{name}.{key}": value
            for name, values in moments["state"].items()
            for key, value in values.items()
            if torch.is_tensor(value)
        }
        tensors = {"model": weights, "optimizer": flat}
        save(root, Checkpoint(1, tensors, {}), 1, begin(root, 1))


def _numbered(optimizer) -> dict:
    state = optimizer.state_dict()["state"]
    return {f"{i}.{k}": v for i, values in state.items() for k, v in values.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--worker", choices=MODES)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.layers, Path(args.out))
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from provenance import provenance

    result: dict = {"layers": args.layers, "world_size": 2}
    with tempfile.TemporaryDirectory() as folder:
        for mode in MODES:
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
            command += ["--nproc-per-node", "2", __file__, "--worker", mode]
            command += ["--layers", str(args.layers), "--out", folder]
            env = os.environ | {"OMP_NUM_THREADS": "1"}
            subprocess.run(command, check=True, env=env, capture_output=True)
            result[mode] = [
                json.loads((Path(folder) / RANK_FILE.format(rank=r, mode=mode)).read_text())
                for r in range(2)
            ]
    result["provenance"] = provenance({"layers": args.layers, "dtype": "float32"})
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
