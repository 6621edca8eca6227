"""The process group that carries weights from the trainer to the vLLM workers
(vllm.weight_sync: collective): rank 0 is the trainer's rank 0, ranks 1.. the workers of every
engine (engine e's tensor-parallel rank r is 1 + e x tp + r). Each whole tensor is broadcast
once from rank 0 and reaches every worker, as TRL's vLLM client and vLLM's RLHF examples do:
memory to memory over NCCL on GPUs, gloo on CPU (where the suite runs it); no copy of the
weights in Ray's object store.

It is a torch.distributed process group of its own (a TCPStore at rank 0's address, torch's
own Gloo/NCCL backends), apart from the trainer's world and from vLLM's: the trainer's
torchrun world and the engines' tensor-parallel groups are untouched.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(seconds=300)  # a tensor of an 8B model crosses in well under a second


def backend() -> str:
    """NCCL where the trainer has a GPU (its tensors are on it), gloo otherwise."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def spec(
    name: str, tensor: torch.Tensor, dtype: torch.dtype | None = None
) -> tuple[str, str, tuple[int, ...]]:
    """(name, dtype's name, shape): what a worker allocates to receive `tensor` (cast to
    `dtype`); a sharded tensor's shape is its whole shape."""
    return name, str(dtype or tensor.dtype).removeprefix("torch."), tuple(tensor.shape)


def listener(host: str) -> socket.socket:
    """Rank 0's store socket, bound to `host` only (a private run's loopback stays private)
    on a free port, kept open until the store takes it (no other process can take the port)."""
    server = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    server.bind((host, 0))
    server.listen()
    return server


def join(
    host: str, port: int, rank: int, world_size: int, kind: str, server: socket.socket | None = None
) -> dist.ProcessGroup:
    """This process's member of the group; blocks until every rank joined. Rank 0 serves the
    store the others connect to, on its `server` socket (listener())."""
    fd = {"master_listen_fd": server.detach()} if server is not None else {}
    store = dist.TCPStore(
        host, port, world_size, is_master=rank == 0, timeout=TIMEOUT, use_libuv=False, **fd
    )
    store = dist.PrefixStore("rollverify-weights", store)
    if kind == "gloo":
        options = dist.ProcessGroupGloo._Options()
        options._timeout = TIMEOUT
        options._devices = [_gloo_device(host)]
        return dist.ProcessGroupGloo(store, rank, world_size, options)
    options = dist.ProcessGroupNCCL.Options()
    options._timeout = TIMEOUT
    return dist.ProcessGroupNCCL(store, rank, world_size, options)


def _gloo_device(host: str):
    """Where this member's gloo pairs listen: loopback when rank 0 is on loopback (a private
    run on one machine stays private), else the interface gloo picks (GLOO_SOCKET_IFNAME)."""
    if ipaddress.ip_address(socket.gethostbyname(host)).is_loopback:
        return dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")
    return dist.ProcessGroupGloo.create_default_device()


def broadcast(group: dist.ProcessGroup, tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` from rank 0 into every member's `tensor` (same shape and dtype), in place,
    done when this returns: an NCCL wait() only orders the GPU stream, so the host waits for
    the stream too (else rank 0 would queue gathers and casts ahead of the broadcasts, up to
    a whole model's worth of GPU memory, and a failed peer would show only at the end)."""
    options = dist.BroadcastOptions()
    options.rootRank = 0
    group.broadcast([tensor], options).wait()
    if tensor.is_cuda:
        torch.cuda.current_stream(tensor.device).synchronize()
    return tensor


def sendable(tensor: torch.Tensor, kind: str) -> torch.Tensor:
    """Rank 0's tensor as the backend sends it: contiguous, on rank 0's GPU over NCCL."""
    tensor = tensor.detach()
    if kind == "nccl" and not tensor.is_cuda:
        tensor = tensor.to(torch.device("cuda", torch.cuda.current_device()))
    return tensor.contiguous()


def abandon(group: dist.ProcessGroup | None) -> None:
    """A group a failed sync left: aborted, so no collective of it waits on (NCCL's
    watchdog would otherwise kill the process over the stuck broadcasts)."""
    abort = getattr(group, "abort", None) or getattr(group, "_shutdown", None)
    if abort is not None:
        with contextlib.suppress(Exception):
            abort()


def device_for(kind: str, device: torch.device) -> torch.device:
    """Where a received tensor lands: the model's GPU over NCCL, host memory over gloo."""
    return device if kind == "nccl" else torch.device("cpu")
