"""`rvctl ui`: the MLflow UI over a run store, on 127.0.0.1 only (this machine's users; to
show it to others on purpose, run `mlflow ui --host 0.0.0.0` yourself, behind a proxy)."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from rvctl.options import OutputOption, TrackingOption


def ui(
    tracking_uri: TrackingOption = None,
    output: OutputOption = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port on 127.0.0.1.")] = 5000,
) -> None:
    """Start the MLflow UI on 127.0.0.1 over the runs' store (default: the output folder's)."""
    from rollverify.tracking.run_records import check_store_exists
    from rollverify.tracking.tracker import default_tracking_uri

    uri = tracking_uri or default_tracking_uri(output or "runs")
    check_store_exists(uri)
    print(f"MLflow UI of {uri}: http://127.0.0.1:{port} (Ctrl-C stops it)", file=sys.stderr)
    command = [sys.executable, "-m", "mlflow", "ui", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--workers", "1"]  # one user on this machine: not 4 processes
    os.execv(sys.executable, [*command, "--backend-store-uri", uri])  # its Ctrl-C, its exit
