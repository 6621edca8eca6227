"""A run of several processes that rvctl launches on this machine listens on loopback only.

torch 2.13's TCPStore binds its server to every interface, whatever host it is given (the host
is where clients connect), and torchrun's rendezvous starts two (the c10d backend's and the
store its workers share). A store takes a socket that already listens (`master_listen_fd`,
its libuv backend): while rvctl launches its workers, every store server torchrun makes in
this process gets one bound to 127.0.0.1. The workers' collectives listen on the interface
GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME names: `lo` (one machine; a user's own setting wins).
A multi-node torchrun (docs/distributed.md) is the user's and keeps torch's defaults.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

INTERFACES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


@contextmanager
def loopback_stores() -> Iterator[None]:
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

    original = dist.TCPStore

    def store(*args: Any, **kwargs: Any):
        if kwargs.get("is_master") and kwargs.get("master_listen_fd") is None:
            names = ("host_name", "port")
            given = dict(zip(names, args, strict=False)) | kwargs
            listener = socket.socket()
            listener.bind(("127.0.0.1", given.get("port") or 0))
            listener.listen(socket.SOMAXCONN)
            given |= {"port": listener.getsockname()[1], "use_libuv": True}
            given["master_listen_fd"] = listener.detach()  # the store's from now on
            return original(**given)
        return original(*args, **kwargs)

    added = {name: "lo" for name in INTERFACES if name not in os.environ}
    os.environ.update(added)  # the workers inherit it
    dist.TCPStore = c10d_rendezvous_backend.TCPStore = store
    try:
        yield
    finally:
        dist.TCPStore = c10d_rendezvous_backend.TCPStore = original
        for name in added:
            os.environ.pop(name, None)
