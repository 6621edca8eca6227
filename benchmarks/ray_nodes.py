"""A real Ray cluster of two nodes for tests, as a user starts one on two hosts: `ray start
--head --block` for the head, `ray start --address HEAD --block` with a custom resource of its
own (`engine_node: 1`, standing in for a GPU node's GPUs) for the second; each stopped by
SIGTERM to its own command (never `ray stop`, which would stop every Ray of this user), or lost
as a host is lost: its raylet SIGKILLed by pid (`kill_raylet`).

Ray's token authentication as benchmarks/ray_cluster.py keeps it: a token of the cluster's own in a
0600 file (RAY_AUTH_TOKEN_PATH), clients with RAY_AUTH_MODE=token.

Loopback only: on Linux `ray start` turns a loopback address into the machine's external one
and listens on every interface (its single-machine mode, which keeps 127.0.0.1, refuses a
second node). So both nodes, and every client of the cluster, run in a network namespace of
the test's own with nothing but `lo` in it (`ip netns`, as root): Ray finds no other address
there, and nothing outside the machine can reach it. `Cluster.command(...)` prefixes a command
with the namespace."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from benchmarks.ray_cluster import RAY, _free_port, user_shell

ROOT = Path(__file__).parents[1]
ENGINE_RESOURCE = "engine_node"


@dataclass
class Cluster:
    namespace: str
    address: str  # the head's GCS, host:port, as a client gives it (vllm.ray_address)
    env: dict[str, str]  # a client's environment: a user's shell, the token, RAY_AUTH_MODE
    head: subprocess.Popen
    worker: subprocess.Popen | None = None
    logs: dict[str, Path] = field(default_factory=dict)
    added: list[subprocess.Popen] = field(default_factory=list)  # engine nodes joined later
    folder: Path | None = None

    def command(self, *args: str) -> list[str]:
        """`args` run in the cluster's network namespace."""
        return ["ip", "netns", "exec", self.namespace, *args]

    def raylet(self, node: subprocess.Popen) -> psutil.Process:
        """The raylet `ray start` started for a node (its child)."""
        (raylet,) = [p for p in _tree(node.pid) if p.name() == "raylet"]
        return raylet

    def kill_raylet(self, node: subprocess.Popen) -> float:
        """The node lost as a host is: its raylet SIGKILLed (no drain, no goodbye to the GCS);
        returns time.monotonic() of the kill."""
        raylet = self.raylet(node)
        raylet.send_signal(signal.SIGKILL)
        return time.monotonic()

    def add_engine_node(self, cpus: int) -> subprocess.Popen:
        """Another node with ENGINE_RESOURCE joins (a lost host's replacement), up when this
        returns."""
        assert self.folder is not None
        name = f"worker{len(self.added) + 2}"
        worker = [RAY, "start", "--block", f"--address={self.address}", f"--num-cpus={cpus}"]
        worker.append(f'--resources={{"{ENGINE_RESOURCE}": 1}}')
        node = _start(self, name, worker, self.folder, self.env)
        self.added.append(node)
        _wait_started(self.logs[name], node)
        return node


def namespace_available() -> bool:
    """`ip netns` works here (root, iproute2)."""
    name = f"rvprobe-{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
    if made:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    return made


@contextmanager
def two_nodes(
    folder: Path, engine_cpus: int = 1, head_cpus: int = 1, health_check_ms: int | None = None
) -> Iterator[Cluster]:
    """The head (head_cpus CPUs) and a second node (engine_cpus CPUs and ENGINE_RESOURCE: 1),
    both up; everything they started is stopped on the way out. `health_check_ms`: the head
    checks each raylet this often and takes it for lost after 3 misses (Ray's default: 3 s,
    5 misses), as a user sets RAY_health_check_* on the head to notice a lost node sooner."""
    namespace = f"rv-{secrets.token_hex(4)}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    token = folder / "ray_auth_token"
    token.touch(mode=0o600)
    token.write_text(secrets.token_hex(32))
    env = user_shell() | {"RAY_AUTH_TOKEN_PATH": str(token)}  # the head finds it: token mode
    # The nodes' workers import this checkout's tests too (tests/stub_sidecar.py)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    checks = {}
    if health_check_ms is not None:
        checks = {"RAY_health_check_period_ms": str(health_check_ms)}
        checks |= {"RAY_health_check_timeout_ms": str(health_check_ms)}
        checks |= {"RAY_health_check_failure_threshold": "3"}
    # Ray's own logs and sockets under /tmp/ray, as a user's: Ray caps a socket path's length.
    # A port of its own even in its own namespace: `ray start` refuses a port that any
    # gcs_server on the machine was started with (it reads their command lines), so the
    # default 6379 collides with a user's or another test's Ray
    port = _free_port()
    address = f"127.0.0.1:{port}"
    cluster = Cluster(namespace, address, env | {"RAY_AUTH_MODE": "token"}, head=None)  # type: ignore[arg-type]
    cluster.folder = folder
    try:
        subprocess.run(cluster.command("ip", "link", "set", "lo", "up"), check=True)
        head = [RAY, "start", "--head", "--block", f"--port={port}", f"--num-cpus={head_cpus}"]
        cluster.head = _start(cluster, "head", head, folder, env | checks)
        _wait_started(cluster.logs["head"], cluster.head)
        worker = [RAY, "start", "--block", f"--address={address}", f"--num-cpus={engine_cpus}"]
        worker.append(f'--resources={{"{ENGINE_RESOURCE}": 1}}')
        cluster.worker = _start(cluster, "worker", worker, folder, cluster.env)
        _wait_started(cluster.logs["worker"], cluster.worker)
        yield cluster
    finally:
        _stop(cluster)
        subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
        # Ray leaves the dead cluster's address for a bare ray.init() to join: remove it.
        current = Path("/tmp/ray/ray_current_cluster")
        with contextlib.suppress(OSError):
            if current.read_text().strip() == address:
                current.unlink()


def _start(cluster: Cluster, name: str, command: list[str], folder: Path, env: dict):
    command += ["--disable-usage-stats"] + (["--include-dashboard=false"] if name == "head" else [])
    log = cluster.logs[name] = folder / f"{name}.log"
    with log.open("w") as out:
        return subprocess.Popen(
            cluster.command(*command), stdout=out, stderr=subprocess.STDOUT, env=env
        )


def _wait_started(log: Path, node: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and node.poll() is None:
        if "Ray runtime started" in log.read_text():
            return
        time.sleep(0.2)
    raise RuntimeError(f"ray start did not come up:\n{log.read_text()[-3000:]}")


def _stop(cluster: Cluster) -> None:
    """SIGTERM to each `ray start --block` (it stops what it started), the worker first; then
    SIGKILL to whatever of theirs is left (a node whose raylet was killed leaves its workers
    and agents to die on their own, up to a minute later)."""
    nodes = [n for n in (*cluster.added, cluster.worker, cluster.head) if n is not None]
    started = {p for node in nodes for p in _tree(node.pid)}
    for node in nodes:
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()
    for process in started:
        with contextlib.suppress(psutil.Error):
            process.kill()


def _tree(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    return []


def node_ip(log: Path) -> str | None:
    found = re.search(r"Local node IP: (\S+)", log.read_text())
    return found.group(1) if found else None
