"""A run of several processes that rvctl launches on this machine listens on loopback only.

torch 2.13's TCPStore binds its server to every interface, whatever host it is given (the host
is where clients connect), and torchrun's rendezvous starts two (the c10d backend's and the
store its workers share). A store takes a socket that already listens (`master_listen_fd`,
its libuv backend): while rvctl launches its workers, every store server torchrun makes in
this process gets one bound to 127.0.0.1 (launch.py makes 127.0.0.1 the node's address, where
the ranks connect). The workers' collectives listen on the interface GLOO_SOCKET_IFNAME /
NCCL_SOCKET_IFNAME names: loopback's (one machine; a user's own setting wins). A multi-node
torchrun (docs/distributed.md) is the user's and keeps torch's defaults.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

INTERFACES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
LOOPBACK = {"linux": "lo", "darwin": "lo0"}.get(sys.platform)
# TCPStore(host_name, port, world_size, is_master, timeout, wait_for_workers, multi_tenant,
# master_listen_fd, use_libuv): its parameters in order, for calls that pass them by position
PARAMETERS = (
    "host_name",
    "port",
    "world_size",
    "is_master",
    "timeout",
    "wait_for_workers",
    "multi_tenant",
    "master_listen_fd",
    "use_libuv",
)


@contextmanager
def loopback_stores() -> Iterator[None]:
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

    original = dist.TCPStore

    def store(*args: Any, **kwargs: Any):
        given = dict(zip(PARAMETERS, args, strict=False)) | kwargs
        if not given.get("is_master") or given.get("master_listen_fd") is not None:
            return original(*args, **kwargs)
        listener = socket.socket()
        try:
            listener.bind(("127.0.0.1", given.get("port") or 0))
            listener.listen(socket.SOMAXCONN)
        except OSError as error:  # (the rendezvous retries on RuntimeError, as torch raises)
            listener.close()
            raise RuntimeError(f"a loopback store on port {given.get('port')}: {error}") from error
        given |= {"port": listener.getsockname()[1], "use_libuv": True}
        # The store owns the socket from now on (should it fail to start, the descriptor is
        # left open rather than closed under a store that may hold it).
        given["master_listen_fd"] = listener.detach()
        return original(**given)

    added = {name: LOOPBACK for name in INTERFACES if name not in os.environ and LOOPBACK}
    os.environ.update(added)  # the workers inherit it
    dist.TCPStore = c10d_rendezvous_backend.TCPStore = store
    try:
        yield
    finally:
        dist.TCPStore = c10d_rendezvous_backend.TCPStore = original
        for name in added:
            os.environ.pop(name, None)
