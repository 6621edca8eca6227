"""A real Ray cluster of one node for tests, as a user starts one: `ray start --head --block`,
stopped by SIGTERM to that command (never `ray stop`, which would stop every Ray of this
user, another test's too)."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")


@contextmanager
def ray_cluster(log: Path, cpus: int = 2) -> Iterator[str]:
    """Start the head node (its output in `log`); yields its address."""
    command = [RAY, "start", "--head", "--block", "--port=0", f"--num-cpus={cpus}"]
    command += ["--include-dashboard=false", "--disable-usage-stats"]
    with log.open("w") as out:
        head = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    address = None
    try:
        address = _address(log, head)
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


def _address(log: Path, head: subprocess.Popen) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and head.poll() is None:
        found = re.search(r"ray start --address='([^']+)'", log.read_text())
        if found:
            return found.group(1)
        time.sleep(0.3)
    raise RuntimeError(f"ray start did not come up:\n{log.read_text()[-3000:]}")
