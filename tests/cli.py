"""rvctl in this process, as `python -m rvctl.app` runs it: its main (one-line errors, exit
codes), without a new interpreter importing torch and TRL again (seconds per call here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings


def run_rvctl(args: list[str], monkeypatch, capsys) -> subprocess.CompletedProcess:
    """`rvctl ARGS`: its exit code, stdout and stderr, as a finished subprocess reports them."""
    from rvctl.app import main

    monkeypatch.setattr(sys, "argv", ["rvctl", *args])
    handler, formatting = signal.getsignal(signal.SIGTERM), warnings.formatwarning
    capsys.readouterr()  # what the test printed before is not rvctl's
    try:
        main()
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    finally:  # main() sets both for the process it owns
        signal.signal(signal.SIGTERM, handler)
        warnings.formatwarning = formatting
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["rvctl", *args], code, out, err)


def run_cli(*args: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    """`python -m rvctl.app ARGS` in a process of its own; `kill_at`: the point it is SIGKILLed
    at (rollverify/infra/faults.py), else none, whatever this process's environment says."""
    env = dict(os.environ)
    env.pop("ROLLVERIFY_KILL_AT", None)
    if kill_at is not None:
        env["ROLLVERIFY_KILL_AT"] = kill_at
    command = [sys.executable, "-m", "rvctl.app", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
