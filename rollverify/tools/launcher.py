"""The sandbox's launcher: `python -I -S -c SOURCE PLAN`, started by bubblewrap inside the
namespaces it made (rollverify/tools/sandbox.py builds the command and the PLAN). Standard
library only: it runs before anything else is trusted.

The program's code is already in its folder (bubblewrap's --file). The launcher is the PID
namespace's init (bubblewrap's --as-pid-1): the kernel delivers no signal the
program sends it, SIGKILL included, so the program cannot end it and the status it writes is
always there to read. It forks the program, which drops to the run's uid (as root), takes the
limits and execs `python -I main.py`; the launcher reaps until the program ends and writes how
it ended ("exit N" / "signal N") and the CPU seconds of everything it reaped. When it exits,
the kernel kills whatever the program left in the namespace.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import resource
import signal
import sys

SCRIPT = "main.py"

# Linux ABI numbers (include/uapi/linux/prctl.h, capability.h).
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAPABILITY_VERSION_3, LAST_CAPABILITY = 0x20080522, 63


def launch(plan: dict) -> None:
    # The init of a PID namespace gets only the signals it handles: Python handles SIGINT
    # (KeyboardInterrupt), which a program of the same uid could then send it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    fds = plan["fds"]
    program = os.fork()
    if program == 0:
        _exec_program(plan)
    ended = _how_it_ended(_reap_until(program))
    used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the program and the orphans reaped
    os.write(fds["status"], f"{ended}\ncpu {used.ru_utime + used.ru_stime:.6f}\n".encode())


def _exec_program(plan: dict) -> None:
    """In the forked child: drop what the program must not have, then exec it. Never returns."""
    fds = plan["fds"]
    try:
        os.dup2(fds["stdout"], 1)  # (its stdin is the launcher's)
        os.dup2(fds["stderr"], 2)
        for fd in fds.values():
            if fd > 2:
                os.set_inheritable(fd, False)  # the program gets 0, 1 and 2 only
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the launcher gone: the program too
        _drop_privileges(plan["user"])
        for name, value in plan["limits"].items():
            _lower_limit(getattr(resource, name), value)
        os.chdir(plan["work"])
        os.execve(plan["python"], [plan["python"], "-I", SCRIPT], plan["env"])
    except BaseException as error:  # reported to run_python, which raises SandboxError
        os.write(fds["status"], f"error {type(error).__name__}: {error}\n".encode())
    os._exit(127)


def _drop_privileges(user: list[int] | None) -> None:
    """No capabilities (bounding, ambient, inheritable), the run's own uid as root, and
    no_new_privs (bubblewrap sets it too): setuid binaries and file capabilities give nothing."""
    for capability in range(LAST_CAPABILITY + 1):
        _prctl(PR_CAPBSET_DROP, capability, check=False)  # past the kernel's last: EINVAL
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    _clear_inheritable_capabilities()
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
    launch(json.loads(sys.argv[1]))
