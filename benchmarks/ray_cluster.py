"""A real Ray cluster of one node for tests and benchmarks, as a user starts one: `ray start
--head --block`, with a token of its own (Ray 2.60's default token authentication; a user runs `ray
get-auth-token --generate` first), stopped by SIGTERM to that command (never `ray stop`, which
would stop every Ray of this user, another test's too)."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")
# What a local rvctl Ray sets in its own process while it runs (a user's shell has none)
LOCAL_RAY_SETTINGS = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE")


def user_shell() -> dict[str, str]:
    """This process's environment as a user's shell would give it."""
    return {k: v for k, v in os.environ.items() if k not in LOCAL_RAY_SETTINGS}


@contextmanager
def ray_cluster(log: Path, cpus: int = 2) -> Iterator[tuple[str, dict[str, str]]]:
    """Start the head node (its output in `log`, its token beside it); yields its address and
    the environment of a client that connects as Ray's docs say (RAY_AUTH_MODE=token, the
    token's file)."""
    port = _free_port()
    command = [RAY, "start", "--head", "--block", f"--port={port}", f"--num-cpus={cpus}"]
    command += ["--include-dashboard=false", "--disable-usage-stats"]
    token = log.parent / "ray_auth_token"
    token.touch(mode=0o600)
    token.write_text(secrets.token_hex(32))
    env = user_shell() | {"RAY_AUTH_TOKEN_PATH": str(token)}  # the head finds it: token mode
    with log.open("w") as out:
        head = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    address = None
    try:
        address = f"{_node_address(log, head)}:{port}"
        yield address, env | {"RAY_AUTH_MODE": "token"}
    finally:
        head.send_signal(signal.SIGTERM)  # it stops the processes it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
        # Ray leaves the dead cluster's address for a bare ray.init() to join: remove it.
        current = Path("/tmp/ray/ray_current_cluster")
        with contextlib.suppress(OSError):
            if address and current.read_text().strip() == address:
                current.unlink()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _node_address(log: Path, head: subprocess.Popen) -> str:
    """The node's address, once `ray start` says the runtime started."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and head.poll() is None:
        text = log.read_text()
        found = re.search(r"Local node IP: (\S+)", text)
        if found and "Ray runtime started" in text:
            return found.group(1)
        time.sleep(0.3)
    raise RuntimeError(f"ray start did not come up:\n{log.read_text()[-3000:]}")
