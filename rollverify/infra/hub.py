"""A hub model on this machine: its folder in the Hugging Face cache, downloaded at a run's
start when it is not there yet (or only in part), a line per file on stderr.

The run's libraries are told to keep quiet (infra/quiet.py turns the hub's progress bars off),
so a first download of a 16 GB model would look like a hang: here each file says what it is
and how big before the download starts. A model already cached whole (at `model.revision`) is
not looked up on the hub at all. Only what loading needs is fetched (MODEL_FILES: configs,
safetensors weights, tokenizer files), as transformers would.
"""

from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

MODEL_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "tokenizer*"]


def model_folder(path: str, revision: str | None) -> str:
    """`path` itself when it is a local folder, else the cached snapshot of hub id `path` at
    `revision` (None: main), downloaded first if it is not cached whole."""
    if Path(path).is_dir():
        return path
    cached = cached_snapshot(path, revision)
    return cached if cached is not None else download(path, revision)


def cached_snapshot(repo_id: str, revision: str | None) -> str | None:
    """The cached snapshot folder of `repo_id` at `revision` if it holds a config, weights
    and a tokenizer (a download cut short does not), or None. No network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except LocalEntryNotFoundError:
        return None
    whole = (
        (folder / "config.json").is_file()
        and any(folder.glob("*.safetensors"))
        and any(folder.glob("tokenizer*"))
    )
    return str(folder) if whole else None


def download(repo_id: str, revision: str | None) -> str:
    """What loading `repo_id` at `revision` needs, into the cache (files already there are
    kept), each file announced on stderr with its size first; the snapshot folder."""
    from huggingface_hub import HfApi, snapshot_download

    info = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
    files = [f for f in info.siblings or [] if _wanted(f.rfilename)]
    name = f"{repo_id}@{revision}" if revision else repo_id
    total = sum(f.size or 0 for f in files)
    say(f"hub: downloading {name}: {len(files)} files, {_size(total)} (not cached yet)")
    for index, file in enumerate(files, 1):
        say(f"hub: {name}: {file.rfilename} ({_size(file.size or 0)}) {index}/{len(files)}")
    # (snapshot_download writes the revision's ref, so the next run finds it by that name)
    folder = snapshot_download(repo_id, revision=revision, allow_patterns=MODEL_FILES)
    say(f"hub: {name}: done")
    return folder


def _wanted(name: str) -> bool:
    return any(fnmatch.fnmatch(Path(name).name, pattern) for pattern in MODEL_FILES)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"
