"""rvctl in this process, as `python -m rvctl.app` runs it: its main (one-line errors, exit
codes), without a new interpreter importing torch and TRL again (seconds per call here)."""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import traceback
import warnings
from pathlib import Path


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
    """rvctl's main with ARGS in a process of its own, that can be SIGKILLed; `kill_at`: the
    point it is killed at (rollverify/infra/kill_points.py), else none, whatever this process's
    environment says.

    The process is forked from a server that imported what `python -m rvctl.app` imports
    (multiprocessing's forkserver, tests/cli_preload.py): a new interpreter spends ~9 s here
    importing torch, transformers, TRL and MLflow, for each of the suite's kill-and-resume
    runs. It gets this process's working directory and environment, and exits as the command
    would (its exit code, -9 when killed); the CLI's own process start (the console script, its
    imports) is tested by the tests that run `python -m rvctl.app` (tests/test_install.py,
    tests/test_cli_imports.py)."""
    env = _environment(kill_at)
    with tempfile.TemporaryDirectory() as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        process = _forkserver().Process(
            target=_rvctl_main, args=(list(args), os.getcwd(), env, str(out), str(err))
        )
        process.start()
        process.join(timeout=600)
        if process.is_alive():
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(["rvctl", *args], 600)
        output, errors = (p.read_text() if p.exists() else "" for p in (out, err))
        return subprocess.CompletedProcess(["rvctl", *args], process.exitcode, output, errors)


def start_cli(*args: str, kill_at: str | None = None, logs: Path):
    """run_cli's process, started and not waited for (join it): its stdout and stderr go to
    `logs`/stdout and `logs`/stderr."""
    env = _environment(kill_at)
    logs.mkdir(parents=True, exist_ok=True)
    process = _forkserver().Process(
        target=_rvctl_main,
        args=(list(args), os.getcwd(), env, str(logs / "stdout"), str(logs / "stderr")),
    )
    process.start()
    return process


def call_in_process(function, *args, kill_at: str | None = None) -> int:
    """`function(*args)` (importable by name, as a Ray worker runs a trial's function) in a
    process of its own from run_cli's forkserver, with kill_at as run_cli's: its exit code
    (0 when it returned, -9 when killed; an error's traceback goes to this stderr, code 1)."""
    process = start_in_process(function, *args, kill_at=kill_at)
    process.join(timeout=600)
    if process.is_alive():
        process.kill()
        process.join()
        raise subprocess.TimeoutExpired([function.__name__], 600)
    return process.exitcode


def start_in_process(function, *args, kill_at: str | None = None):
    """call_in_process's process, started and not waited for (join it)."""
    env = _environment(kill_at)
    process = _forkserver().Process(target=_call, args=(function, args, os.getcwd(), env))
    process.start()
    return process


def _call(function, args: tuple, cwd: str, env: dict) -> None:
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    code = 0
    try:
        function(*args)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _environment(kill_at: str | None) -> dict[str, str]:
    """This process's environment, with ROLLVERIFY_KILL_AT set to `kill_at` alone."""
    env = dict(os.environ)
    env.pop("ROLLVERIFY_KILL_AT", None)
    if kill_at is not None:
        env["ROLLVERIFY_KILL_AT"] = kill_at
    return env


def _forkserver():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.cli_preload"])
    return context


def _rvctl_main(args: list[str], cwd: str, env: dict, out: str, err: str) -> None:
    """In the forked process: `rvctl ARGS` as its own process would run it."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(file, fd)
        os.close(file)
    sys.argv = ["rvctl", *args]
    from rvctl.app import main

    code = 0
    try:
        main()
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    except BaseException:  # as the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # what the interpreter runs at exit (a forked child skips them)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
