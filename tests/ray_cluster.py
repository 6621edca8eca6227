"""A real Ray cluster of one node for tests, as a user starts one: `ray start --head --block`,
stopped by SIGTERM to that command (never `ray stop`, which would stop every Ray of this
user, another test's too)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")
SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # set by a local rvctl Ray in this process


@contextmanager
def ray_cluster(log: Path, cpus: int = 2) -> Iterator[str]:
    """Start the head node (its output in `log`); yields its address. In the environment a
    user's shell would give it: not the single-machine mode a local rvctl Ray sets."""
    port = _free_port()
    command = [RAY, "start", "--head", "--block", f"--port={port}", f"--num-cpus={cpus}"]
    command += ["--include-dashboard=false", "--disable-usage-stats"]
    env = {k: v for k, v in os.environ.items() if k not in (SINGLE_MACHINE, "RAY_AUTH_TOKEN")}
    with log.open("w") as out:
        head = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    address = None
    try:
        address = f"{_node_address(log, head)}:{port}"
        yield address
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
