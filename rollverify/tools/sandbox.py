"""Run model-written Python in a local sandbox: one subprocess, no Docker, no service.

    result = run_python("print(input()[::-1])", stdin="abc", timeout_s=5)
    result.stdout == "cba\\n"; result.isolation == "namespaces+own-uid" (as root)

Threat model. The code is untrusted and may be hostile, but runs on a kernel we trust: it is
model output to be scored, not an attacker with a kernel exploit. Contained, and how:

- network: a private network namespace (`unshare --net`) with only a loopback that is down:
  no connection to this machine's ports (127.0.0.1 included), its abstract unix sockets or
  any other address.
- leftover processes: a private PID namespace whose init is our launcher; when the program
  ends, or when the wall timeout kills the launcher, the kernel kills everything in the
  namespace, daemonised or not, before run_python returns (`unshare --fork --kill-child`,
  plus the process group; `setpriv --pdeathsig` ends it all if the caller dies).
- CPU and wall time: RLIMIT_CPU (per process, about timeout_s) and the wall timeout.
- memory: RLIMIT_AS (memory_mb of address space per process: MemoryError, not the OOM killer).
- processes: RLIMIT_NPROC (64) applied to an unprivileged uid, so a fork bomb stops there.
- disk writes: the whole filesystem is read-only in a private mount namespace (mount_setattr,
  recursive); the program's folder (its cwd, HOME and TMPDIR) is a fresh tmpfs of 64 MiB that
  vanishes with it. RLIMIT_FSIZE caps one file (and stdout, stderr: files, not pipes), RLIMIT_NOFILE
  open files, RLIMIT_CORE is 0.
- reading the user's files: the home directory, /root, /home, /tmp, /var/tmp, /dev/shm and /run
  are covered by empty read-only tmpfs mounts (only the interpreter's own folders are bound back,
  read-only), and, as root, the program runs as a uid of its own, in group nogroup.
- privileges: as root, setresuid/setresgid to an unused uid drawn for this run (so that
  RLIMIT_NPROC, which counts a uid's processes, is not shared: one program's fork bomb does
  not starve a concurrent one), group nogroup, no supplementary groups; always an empty
  capability bounding and inheritable set and no_new_privs (setuid binaries give nothing).
  Without root: a user namespace (`unshare --user --map-root-user`): the same mounts, the uid
  stays the caller's (root inside the namespace, without capabilities).

The mechanism is chosen at call time, strongest first ("namespaces+own-uid" as root,
"namespaces+userns" otherwise) and recorded in SandboxResult.isolation. Where neither works
run_python raises SandboxUnavailable unless allow_unisolated=True ("none": resource limits
only, no network, process or file isolation).

Not contained: kernel exploits and container escapes; side channels (timing, cache, /proc
and /sys statistics); reading world-readable files outside the hidden folders (/etc, /usr,
/proc, /sys, a checkout such as /work with mode 0755, the interpreter's site-packages);
filesystem unix sockets outside the hidden folders that allow others; without root,
RLIMIT_NPROC counts every process of the caller's uid (its own included); memory is address
space, not resident memory (no cgroup); the tmpfs folder is memory, not disk. Python as the
namespace's init would ignore signals without a handler, so the launcher stays init and the
program is pid 2. multiprocessing's locks need a writable /dev/shm and fail here.

Needs Linux >= 5.12 (mount_setattr) and util-linux's unshare (setpriv optional).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import grp
import json
import math
import os
import pwd
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

AS_ROOT = "namespaces+own-uid"
IN_USER_NAMESPACE = "namespaces+userns"
UNISOLATED = "none"

SANDBOX_FOLDER = "/tmp/sandbox"  # inside the mount namespace: a fresh tmpfs
SCRIPT = "main.py"
OUTPUTS = ("stdout", "stderr", "status", "log")  # files in run_python's temporary folder
HIDDEN_FOLDERS = ("/root", "/home", "/tmp", "/var/tmp", "/dev/shm", "/run")
PATH = "/usr/local/bin:/usr/bin:/bin"
PROCESS_LIMIT = 64  # processes and threads of the sandbox uid
OWN_UID_BASE, OWN_UID_RANGE = 0x60000000, 2**24  # as root, a run's uid: far above accounts
OPEN_FILES_LIMIT = 64
FILE_SIZE_LIMIT = 32 * 2**20
FOLDER_SIZE = "64m"
FOLDER_INODES = 4096
KILL_GRACE_S = 5.0  # how long a killed namespace may take to go

# Linux ABI numbers (include/uapi/linux/mount.h, prctl.h, capability.h; mount_setattr is 442
# on every architecture).
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC = 2, 4, 8, 4096, 16384
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAPABILITY_VERSION_3, LAST_CAPABILITY = 0x20080522, 63


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program in it)."""


class SandboxUnavailable(SandboxError):
    """No isolation mechanism works on this machine."""


@dataclass(frozen=True)
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None: killed (by a signal, a limit or the timeout)
    timed_out: bool
    killed: bool
    seconds: float
    truncated: bool  # stdout or stderr was longer than max_output_bytes
    isolation: str  # AS_ROOT, IN_USER_NAMESPACE or UNISOLATED
    cpu_seconds: float | None = None  # the program's user + system CPU (None: killed first)


def run_python(
    code: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    stdin: str = "",
    max_output_bytes: int = 64_000,
    allow_unisolated: bool = False,
) -> SandboxResult:
    """Run `code` with `sys.executable -I` in the strongest sandbox available (module doc)."""
    isolation = choose_isolation(allow_unisolated)
    with (
        tempfile.TemporaryDirectory(prefix="rollverify-", ignore_cleanup_errors=True) as name,
        contextlib.ExitStack() as opened,
    ):
        folder = Path(name)
        (folder / "code.py").write_text(code, encoding="utf-8")
        (folder / "stdin").write_text(stdin, encoding="utf-8")
        files = {n: opened.enter_context(open(folder / n, "wb")) for n in OUTPUTS}
        program_fds = {n: files[n].fileno() for n in ("stdout", "stderr", "status")}
        plan = _plan(isolation, folder, program_fds, timeout_s, memory_mb)
        started = time.monotonic()
        process = subprocess.Popen(
            _command(isolation, plan),
            stdin=opened.enter_context(open(folder / "stdin", "rb")),
            stdout=files["log"],  # unshare's and the launcher's own messages
            stderr=files["log"],
            pass_fds=tuple(program_fds.values()),
            env={"PATH": PATH},
            cwd=folder,
            start_new_session=True,  # its own process group, killed whole
        )
        timed_out = _wait_or_kill(process, timeout_s)
        seconds = time.monotonic() - started
        return _result(folder, isolation, timed_out, seconds, max_output_bytes)


def choose_isolation(allow_unisolated: bool = False) -> str:
    """The strongest mechanism that works here now (probed once per process and uid)."""
    as_root = os.geteuid() == 0
    if _namespaces_work(user_namespace=not as_root):
        return AS_ROOT if as_root else IN_USER_NAMESPACE
    if allow_unisolated:
        return UNISOLATED
    raise SandboxUnavailable(
        "no sandbox here: `unshare` (util-linux) cannot create network, PID and mount "
        "namespaces"
        + ("" if as_root else " in a user namespace")
        + "; pass allow_unisolated=True to run with resource limits only"
    )


@functools.cache
def _namespaces_work(user_namespace: bool) -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = [unshare, *_user_namespace_flags(user_namespace), "--net", "--pid", "--fork"]
    probe += ["--mount", "--ipc", "--", "true"]
    return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0


def _user_namespace_flags(user_namespace: bool) -> list[str]:
    return ["--user", "--map-root-user"] if user_namespace else []


def _plan(isolation: str, folder: Path, fds: dict, timeout_s: float, memory_mb: int) -> dict:
    """What the launcher (below, in the namespaces) does, as JSON-able data."""
    isolated = isolation != UNISOLATED
    work = SANDBOX_FOLDER if isolated else str(folder / "work")
    hidden = _hidden_folders() if isolated else []
    return {
        "isolation": isolation,
        "code": str(folder / "code.py"),
        "fds": fds,  # the program's stdout and stderr, how it ended (launcher: status)
        "work": work,
        "hide": hidden,
        "expose": _interpreter_folders(hidden),
        "user": _own_user() if isolation == AS_ROOT else None,
        "limits": _limits(timeout_s, memory_mb),
        # the real path: the folders bound back are real paths, and a venv's link (say under
        # /tmp, which the sandbox covers) is not one of them
        "python": os.path.realpath(sys.executable),
        "env": {"PATH": PATH, "HOME": work, "TMPDIR": work},  # /tmp is read-only inside
    }


def _limits(timeout_s: float, memory_mb: int) -> dict[str, int]:
    return {
        "RLIMIT_AS": memory_mb * 2**20,
        "RLIMIT_CPU": math.ceil(timeout_s) + 1,  # soft = hard: SIGKILL (SIGXCPU can be caught)
        "RLIMIT_NPROC": PROCESS_LIMIT,
        "RLIMIT_FSIZE": FILE_SIZE_LIMIT,
        "RLIMIT_NOFILE": OPEN_FILES_LIMIT,
        "RLIMIT_CORE": 0,
    }


def _own_user() -> list[int]:
    """A uid no account and no other sandbox uses (random, from a range above any system's
    accounts: two of 16 concurrent runs share one with odds under 1e-5), group nogroup."""
    while True:
        uid = OWN_UID_BASE + secrets.randbelow(OWN_UID_RANGE)
        with contextlib.suppress(KeyError):
            pwd.getpwuid(uid)
            continue
        return [uid, _nogroup()]


def _nogroup() -> int:
    for name in ("nogroup", "nobody"):
        with contextlib.suppress(KeyError):
            return grp.getgrnam(name).gr_gid
    return 65534


def _hidden_folders() -> list[str]:
    candidates = {*HIDDEN_FOLDERS, os.path.expanduser("~"), pwd.getpwuid(os.geteuid()).pw_dir}
    real = {os.path.realpath(path) for path in candidates if os.path.isdir(path)}
    return _outermost(real - {"/"})


def _interpreter_folders(hidden: list[str]) -> list[str]:
    """The interpreter's folders under a hidden one (pyenv under ~): bound back, read-only."""
    executable = sys.executable
    candidates = (sys.prefix, sys.base_prefix, os.path.dirname(executable))
    folders = {os.path.realpath(path) for path in candidates}
    folders.add(os.path.dirname(os.path.realpath(executable)))
    return _outermost(f for f in folders if any(_inside(f, h) for h in hidden))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _outermost(paths) -> list[str]:
    paths = sorted(set(paths))
    return [p for p in paths if not any(q != p and _inside(p, q) for q in paths)]


def _command(isolation: str, plan: dict) -> list[str]:
    launcher = [sys.executable, "-I", "-S", str(Path(__file__).resolve()), json.dumps(plan)]
    setpriv = shutil.which("setpriv")
    # Should this process die, its child dies too (and with it the PID namespace).
    orphan_guard = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
    if isolation == UNISOLATED:
        return [*orphan_guard, *launcher]
    namespaces = [shutil.which("unshare"), *_user_namespace_flags(isolation == IN_USER_NAMESPACE)]
    namespaces += ["--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc"]
    return [*orphan_guard, *namespaces, "--ipc", "--", *launcher]


def _wait_or_kill(process: subprocess.Popen, timeout_s: float) -> bool:
    """Whether the wall timeout ran out (everything the program started is gone either way)."""
    try:
        process.wait(timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        _kill_namespace(process)
        return True
    finally:
        _kill_group(process.pid)  # leftovers of the unisolated mode; no-op in namespaces


def _kill_namespace(process: subprocess.Popen) -> None:
    """SIGKILL unshare's child, the namespace's init: the kernel kills all in the namespace and
    unshare exits only once they are gone, so no process of it outlives this call."""
    deadline = time.monotonic() + KILL_GRACE_S
    while process.poll() is None and time.monotonic() < deadline:
        for pid in _children_of(process.pid):  # none yet if unshare has not forked: loop
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.05)
    _kill_group(process.pid)
    process.wait()


def _kill_group(group: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _children_of(parent: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            after_name = stat.read_text().rsplit(")", 1)[1].split()  # the name may hold ")"
            if int(after_name[1]) == parent:
                children.append(int(stat.parent.name))
    return children


def _result(
    folder: Path, isolation: str, timed_out: bool, seconds: float, limit: int
) -> SandboxResult:
    stdout, stdout_cut = _read_capped(folder / "stdout", limit)
    stderr, stderr_cut = _read_capped(folder / "stderr", limit)
    first_line, _, rest = (folder / "status").read_text().partition("\n")
    how, _, detail = first_line.partition(" ")
    cpu = rest.split()[1] if rest.startswith("cpu ") else None
    if how == "error":
        raise SandboxError(f"the program could not start in the sandbox: {detail}")
    if not how and not timed_out:
        log = (folder / "log").read_text(errors="replace").strip()
        raise SandboxError(f"the sandbox failed ({isolation}): {log}")
    return SandboxResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=int(detail) if how == "exit" else None,
        timed_out=timed_out,
        killed=timed_out or how == "signal",
        seconds=seconds,
        truncated=stdout_cut or stderr_cut,
        isolation=isolation,
        cpu_seconds=None if cpu is None else float(cpu),
    )


def _read_capped(path: Path, limit: int) -> tuple[str, bool]:
    with open(path, "rb") as stream:
        data = stream.read(limit + 1)
    return data[:limit].decode("utf-8", errors="replace"), len(data) > limit


# The launcher: `python -I -S sandbox.py PLAN`, as root of the new namespaces (or as the caller
# in the unisolated mode). It stays the PID namespace's init and runs the program as its child.


def _launch(plan: dict) -> None:
    code = Path(plan["code"]).read_bytes()  # before /tmp is covered
    fds = plan["fds"]
    for fd in fds.values():
        os.set_inheritable(fd, False)  # the program gets stdout and stderr as 1 and 2 only
    if plan["isolation"] != UNISOLATED:
        _build_filesystem(plan)
    os.makedirs(plan["work"], exist_ok=True)
    script = Path(plan["work"], SCRIPT)
    script.write_bytes(code)
    script.chmod(0o644)  # readable, not writable, by the program's uid
    program = os.fork()
    if program == 0:
        _exec_program(plan)
    ended = _how_it_ended(_reap_until(program))
    used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the program and the orphans reaped
    os.write(fds["status"], f"{ended}\ncpu {used.ru_utime + used.ru_stime:.6f}\n".encode())


def _build_filesystem(plan: dict) -> None:
    """Hide, bind the interpreter back, make everything read-only, then mount the program's
    own writable folder."""
    parent = os.path.dirname(plan["work"])
    if parent not in plan["hide"]:  # else the program's folder would be made on the host
        raise SandboxError(f"{parent} is not covered by a tmpfs here")
    kept = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in plan["expose"]}
    for folder in plan["hide"]:
        _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=1m")
    for path, fd in kept.items():
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
    os.makedirs(plan["work"], exist_ok=True)
    _make_read_only_recursively("/")
    uid, gid = plan["user"] or (0, 0)
    options = f"size={FOLDER_SIZE},nr_inodes={FOLDER_INODES},mode=700,uid={uid},gid={gid}"
    _mount("tmpfs", plan["work"], "tmpfs", MS_NOSUID | MS_NODEV, options)


def _exec_program(plan: dict) -> None:
    """In the forked child: drop what the program must not have, then exec it. Never returns."""
    fds = plan["fds"]
    try:
        os.dup2(fds["stdout"], 1)
        os.dup2(fds["stderr"], 2)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if plan["isolation"] != UNISOLATED:
            _drop_privileges(plan["user"])
        for name, value in plan["limits"].items():
            _lower_limit(getattr(resource, name), value)
        os.chdir(plan["work"])
        os.execve(plan["python"], [plan["python"], "-I", SCRIPT], plan["env"])
    except BaseException as error:  # reported to run_python, which raises SandboxError
        os.write(fds["status"], f"error {type(error).__name__}: {error}\n".encode())
    os._exit(127)


def _drop_privileges(user: list[int] | None) -> None:
    for capability in range(LAST_CAPABILITY + 1):
        _prctl(PR_CAPBSET_DROP, capability, check=False)  # past the kernel's last: EINVAL
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    _clear_inheritable_capabilities()  # else root in a user namespace keeps them over exec
    if user is not None:
        uid, gid = user
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def _lower_limit(which: int, value: int) -> None:
    _, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value))


def _reap_until(program: int) -> int:
    """Wait for the program, reaping the orphans the namespace hands its init meanwhile."""
    while True:
        pid, wait_status = os.wait()
        if pid == program:
            return wait_status


def _how_it_ended(wait_status: int) -> str:
    if os.WIFSIGNALED(wait_status):
        return f"signal {os.WTERMSIG(wait_status)}"
    return f"exit {os.waitstatus_to_exitcode(wait_status)}"


# Thin ctypes calls the os module lacks.


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _checked(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    encoded = [s.encode() if s is not None else None for s in (source, target, fstype, data)]
    source_b, target_b, fstype_b, data_b = encoded
    _checked(
        _libc().mount(source_b, target_b, fstype_b, ctypes.c_ulong(flags), data_b),
        f"mount {target}",
    )


def _make_read_only_recursively(path: str) -> None:
    attributes = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)  # struct mount_attr
    call = _libc().syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        path.encode(),
        ctypes.c_uint(AT_RECURSIVE),
        attributes,
        ctypes.c_size_t(ctypes.sizeof(attributes)),
    )
    _checked(call, f"mount_setattr {path} read-only")


def _prctl(option: int, value: int, check: bool = True) -> None:
    result = _libc().prctl(
        ctypes.c_int(option),
        ctypes.c_ulong(value),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
    )
    if check:
        _checked(result, f"prctl {option}")


class _CapabilityHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapabilitySets(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]


def _clear_inheritable_capabilities() -> None:
    header = _CapabilityHeader(CAPABILITY_VERSION_3, 0)
    sets = (_CapabilitySets * 2)()  # version 3: 64 bits in two halves
    _checked(_libc().capget(ctypes.byref(header), sets), "capget")
    for half in sets:
        half.inheritable = 0
    _checked(_libc().capset(ctypes.byref(header), sets), "capset")


if __name__ == "__main__":
    _launch(json.loads(sys.argv[1]))
