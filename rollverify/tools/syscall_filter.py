"""The system calls a sandboxed program may not make: a seccomp filter built with libseccomp
(through pyseccomp, its ctypes binding), compiled once per process to the BPF program that
bubblewrap installs before it starts the launcher (`--seccomp FD`).

A deny list on top of the namespaces, not an allow list: Python and its C extensions make a
wide and changing set of calls, and what is denied here is what the namespaces, the dropped
capabilities and the uid do not already stop, or what would widen the kernel's surface for no
use a scored program has. Denied calls fail with EPERM (ENOSYS for clone3, so that the C
library falls back to clone, whose namespace flags the filter can read). A call of another
architecture's ABI (x32, i386 on x86-64) kills the process: libseccomp's filter for the native
architecture only.
"""

from __future__ import annotations

import errno
import functools
import tempfile

# why: calls. Names unknown on this architecture are skipped.
DENIED = {
    "reading or steering another process": "ptrace process_vm_readv process_vm_writev kcmp "
    "pidfd_getfd",
    "mounts and namespaces": "mount umount2 pivot_root chroot move_mount open_tree fsopen "
    "fsconfig fsmount fspick mount_setattr unshare setns",
    "kernel attack surface": "bpf perf_event_open userfaultfd io_uring_setup io_uring_enter "
    "io_uring_register keyctl add_key request_key open_by_handle_at name_to_handle_at "
    "fanotify_init lookup_dcookie uselib personality",
    "the machine's state": "kexec_load kexec_file_load init_module finit_module delete_module "
    "reboot swapon swapoff acct quotactl quotactl_fd iopl ioperm syslog vhangup settimeofday "
    "clock_settime clock_adjtime adjtimex sethostname setdomainname",
}
NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)


@functools.cache
def filter_program() -> tuple[bytes | None, str]:
    """(the BPF program, "") or (None, why there is none here)."""
    try:
        import pyseccomp as seccomp
    except ImportError:
        return None, "pyseccomp is not installed (pip install pyseccomp)"
    try:
        rules = seccomp.SyscallFilter(seccomp.ALLOW)
    except (OSError, RuntimeError, AttributeError) as error:  # no libseccomp.so.2
        return None, f"libseccomp cannot be loaded ({error})"
    denied = seccomp.ERRNO(errno.EPERM)
    for calls in DENIED.values():
        for call in calls.split():
            try:
                rules.add_rule(denied, call)
            except (OSError, ValueError, RuntimeError):  # not a call of this architecture
                continue
    for flag in NAMESPACE_FLAGS:
        rules.add_rule(denied, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # its flags are behind a pointer
    with tempfile.TemporaryFile() as compiled:
        rules.export_bpf(compiled)
        compiled.seek(0)
        return compiled.read(), ""
