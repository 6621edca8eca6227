"""`rvctl ui`: the MLflow UI over the run store, listening on 127.0.0.1 only."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import psutil
from mlflow.tracking import MlflowClient


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_ui_serves_the_store_on_loopback_only(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).create_experiment("rollverify")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "rvctl.app", "ui", "--tracking-uri", uri, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline, page = time.monotonic() + 90, None
        while page is None and time.monotonic() < deadline and server.poll() is None:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).status
            except OSError:
                time.sleep(0.5)
        assert page == 200, server.stderr.read() if server.poll() is not None else "no answer"
        tree = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
        listening = {
            c.laddr.ip
            for p in tree
            for c in p.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        }
        assert listening == {"127.0.0.1"}
    finally:
        server.terminate()
        server.wait(timeout=30)
