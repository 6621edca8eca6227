"""A hub model on this machine: its folder in the Hugging Face cache, downloaded at a run's
start when it is not there yet, a line per file on stderr.

The run's libraries are told to keep quiet (infra/quiet.py turns the hub's progress bars off),
so a first download of a 16 GB model would look like a hang: here each file says what it is
and how big before it comes. A model already cached (at `model.revision`) is not looked up on
the hub at all.
"""

from __future__ import annotations

import sys
from pathlib import Path


def model_folder(path: str, revision: str | None) -> str:
    """`path` itself when it is a local folder, else the cached snapshot of hub id `path` at
    `revision` (None: main), downloaded first if it is not cached."""
    if Path(path).is_dir():
        return path
    cached = cached_snapshot(path, revision)
    return cached if cached is not None else download(path, revision)


def cached_snapshot(repo_id: str, revision: str | None) -> str | None:
    """The cached snapshot folder of `repo_id` at `revision`, or None (no network)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return snapshot_download(repo_id, revision=revision, local_files_only=True)
    except LocalEntryNotFoundError:
        return None


def download(repo_id: str, revision: str | None) -> str:
    """Every file of `repo_id` at `revision` into the cache, one at a time, each announced on
    stderr with its size; the snapshot folder."""
    from huggingface_hub import HfApi, hf_hub_download

    info = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
    files = info.siblings or []
    total = sum(f.size or 0 for f in files)
    name = f"{repo_id}@{info.sha[:12]}" if info.sha else repo_id
    say(f"hub: downloading {name}: {len(files)} files, {_size(total)} (not cached yet)")
    for index, file in enumerate(files, 1):
        say(f"hub: {name}: {file.rfilename} ({_size(file.size or 0)}) {index}/{len(files)}")
        hf_hub_download(repo_id, file.rfilename, revision=info.sha or revision)
    say(f"hub: {name}: done")
    snapshot = cached_snapshot(repo_id, info.sha or revision)
    assert snapshot is not None, "every file was downloaded"
    return snapshot


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"
