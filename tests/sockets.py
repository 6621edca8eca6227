"""What a process tree exposes: the addresses it listens on, and where its Ray token lives."""

from __future__ import annotations

import contextlib
import ipaddress
import os
from pathlib import Path

import psutil


def tree(pid: int) -> list[psutil.Process]:
    """The process and every descendant (none if it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def alive(processes) -> list[psutil.Process]:
    """Those of the processes still running (a zombie has ended)."""
    return [p for p in processes if p.is_running() and p.status() != "zombie"]


def process_name(process: psutil.Process) -> str:
    """Its name and whole command line (a spawned vLLM engine core reads `python -B -c "from
    multiprocessing.spawn import spawn_main..."` until it sets its title, so its first words
    name nothing); "?" once it is gone."""
    try:
        return (process.name() + " " + " ".join(process.cmdline()))[:200]
    except Exception:
        return "?"


def shared_memory_of(processes) -> set[str]:
    """The /dev/shm blocks the processes map (those still running and readable)."""
    paths: set[str] = set()
    for process in processes:
        with contextlib.suppress(Exception):  # gone, or not ours to read
            paths |= {m.path for m in process.memory_maps() if m.path.startswith("/dev/shm/")}
    return paths


def listening(processes) -> set[tuple[str, str, int]]:
    """(process name, address, port) of every TCP socket the processes listen on."""
    found = set()
    for process in processes:
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            for socket in process.net_connections(kind="inet"):
                if socket.status == psutil.CONN_LISTEN:
                    found.add((process.name(), socket.laddr.ip, socket.laddr.port))
    return found


def beyond_loopback(sockets) -> list[tuple[str, str, int]]:
    """Those not bound to a loopback address (an IPv6 socket on ::ffff:127.0.0.1 is)."""
    return sorted(s for s in sockets if not _loopback(s[1]))


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def token_readable_by_others(processes) -> str | None:
    """Where a Ray process of the tree reads its auth token if others can read it there,
    else None: a token in the process environment (/proc/PID/environ is the user's alone),
    or in a file of mode 0600, is private."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            if "raylet" not in process.name():
                continue
            environment = process.environ()
            if "RAY_AUTH_TOKEN" in environment:
                continue
            home = environment.get("HOME", os.path.expanduser("~"))
            path = Path(environment.get("RAY_AUTH_TOKEN_PATH", f"{home}/.ray/auth_token"))
            if path.exists() and path.stat().st_mode & 0o077:
                return f"{path} (mode {oct(path.stat().st_mode & 0o777)})"
    return None
