"""What a sandboxed program sees of this machine's files: an allowlist bound read-only over an
empty root (namespaces.py mounts it). Only what the interpreter needs to run a program:

- the interpreter (sys.executable's real file) and the shared libraries it and the standard
  library's extension modules load (as `ldd` resolves them), with the loader's cache;
- the standard library's folder, with its `site-packages` and its `test` package covered by
  empty folders (no installed package, no data set, no project checkout on the view);
- the packages a task declares it needs (ReTool's numpy), each folder bound alone into the
  interpreter's first site folder it can hold (the standard library's site-packages, a
  system's dist-packages), where `python -I` finds it.

Nothing else: no /etc, /usr/share, /home, /root, /tmp, venv or checkout, so no file of a graded
problem's tests (an installed HumanEval, an MBPP or custom problem file) is there to read.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

COVERED_IN_STDLIB = ("site-packages", "test")  # an installed package's data; CPython's tests
LOADER_CACHE = "/etc/ld.so.cache"  # which folder holds each library: paths, no data
_LIBRARY = re.compile(r"(/\S+)")


@functools.cache
def interpreter_view() -> tuple[str, ...]:
    """The files and folders the interpreter needs, outermost only (each bound read-only)."""
    executable = os.path.realpath(sys.executable)
    stdlib = standard_library()
    files = list(_files_in(stdlib))
    extensions = [path for path in files if path.endswith(".so")]
    paths = {executable, stdlib, *shared_libraries([executable, *extensions])}
    paths |= _linked_from(stdlib, files)  # Debian's sitecustomize.py, a link into /etc
    if os.path.isfile(LOADER_CACHE):
        paths.add(LOADER_CACHE)
    return tuple(outermost(paths))


def standard_library() -> str:
    """The base interpreter's standard library folder (a venv's is its base's)."""
    return os.path.realpath(sysconfig.get_paths()["stdlib"])


def covered_in_standard_library() -> list[str]:
    stdlib = standard_library()
    return [f"{stdlib}/{name}" for name in COVERED_IN_STDLIB if os.path.isdir(f"{stdlib}/{name}")]


@functools.cache
def package_view(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(source, target) binds for the declared packages: each one's folder (and its wheel's
    bundled `<name>.libs`) into the sandbox's site-packages, and the libraries they load."""
    site = package_site()
    binds, extensions = [], []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(f"a sandbox's declared package {name!r} is not installed")
        folder = Path(os.path.realpath(spec.submodule_search_locations[0]))
        for path in (folder, folder.with_name(f"{name}.libs")):
            if path.is_dir():
                binds.append((str(path), f"{site}/{path.name}"))
                extensions += [str(p) for p in path.rglob("*.so*") if p.is_file()]
    libraries = set(shared_libraries(extensions)) - set(interpreter_view())
    inside = [s for s, _ in binds]
    binds += [(lib, lib) for lib in sorted(libraries) if not any(_inside(lib, f) for f in inside)]
    return tuple(binds)


def package_site() -> str:
    """Where the declared packages go: the first of the interpreter's site folders (which
    `python -I` puts on its path when they exist) that is covered or can be made (outside the
    read-only standard library)."""
    stdlib, covered = standard_library(), covered_in_standard_library()
    for folder in site.getsitepackages([sys.base_prefix]):
        if folder in covered or not _inside(folder, stdlib):
            return folder
    raise OSError(f"no site folder of {sys.executable} to bind a declared package into")


def shared_libraries(files: list[str]) -> list[str]:
    """The libraries `files` load, as the loader resolves them here (ldd's paths)."""
    found: set[str] = set()
    for start in range(0, len(files), 200):  # (a bounded command line)
        done = subprocess.run(
            ["ldd", *files[start : start + 200]], capture_output=True, text=True, check=False
        )
        for line in done.stdout.splitlines():
            if line.startswith(("\t", " ")) and "not found" not in line:
                found.update(m for m in _LIBRARY.findall(line) if os.path.isfile(m))
    return sorted(found)


def parents(path: str) -> list[str]:
    """The folders above `path`, outermost first (but /)."""
    return [str(p) for p in reversed(Path(path).parents) if str(p) != "/"]


def outermost(paths) -> list[str]:
    paths = sorted(set(paths))
    return [p for p in paths if not any(q != p and _inside(p, q) for q in paths)]


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _files_in(stdlib: str):
    """The standard library's files (links too), but those of its covered folders."""
    for folder, subfolders, names in os.walk(stdlib):
        if folder == stdlib:
            subfolders[:] = [name for name in subfolders if name not in COVERED_IN_STDLIB]
        yield from (os.path.join(folder, name) for name in names)


def _linked_from(stdlib: str, files: list[str]) -> set[str]:
    """The files outside `stdlib` that links in it point to."""
    targets = {os.path.realpath(path) for path in files if os.path.islink(path)}
    return {t for t in targets if os.path.isfile(t) and not _inside(t, stdlib)}
