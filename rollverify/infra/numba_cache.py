"""numba's cache (`njit(cache=True)`) across files: a compiled function that calls a function
of another file holds that callee's compiled code, and numba checks only the caller's own file
before it loads it from the cache (numba's documented limit: "changes in other files are not
detected"). A kernel split over several files would go on running an old callee after its file
changed. `forget_if_changed` drops the cache of all of them whenever any of their files
changes: a digest of the files, kept beside the cache, tells."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from rollverify.infra.atomic_write import atomic_write_text

STAMP = "numba-sources.sha256"  # beside the cache files (a folder's: one per cache folder)


def sources_digest(files: Iterable[Path]) -> str:
    """sha256 over the files' names and contents, in name order."""
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.name):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def forget_if_changed(dispatchers: Iterable, files: Iterable[Path]) -> bool:
    """Drop every cached compilation of `dispatchers` (numba njit functions, cache=True) if
    `files` (theirs, and anything they compile in) differ from when the cache was made; call
    it before any of them runs. Returns whether it dropped them. Where numba cannot cache (no
    writable folder), there is nothing to drop."""
    from numba.core.caching import FunctionCache

    digest = sources_digest(files)
    try:
        caches = [FunctionCache(d.py_func) for d in dispatchers]
    except (RuntimeError, OSError):  # no cache folder numba could write: nothing cached
        return False
    folders = {Path(cache.cache_path) for cache in caches}
    if all(_stamp(folder) == digest for folder in folders):
        return False
    for cache in caches:
        cache.flush()  # an empty index: each compiles anew, then caches again
    for folder in folders:
        atomic_write_text(folder / STAMP, digest + "\n")
    return True


def _stamp(folder: Path) -> str | None:
    path = folder / STAMP
    return path.read_text().strip() if path.is_file() else None
