"""Whether a run's model is there before anything loads it: a local folder with a config,
weights and a tokenizer, or a hub id in the local cache or on a hub that answers at once
(preflight.py runs it with the other checks)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from rollverify.config import RunConfig

WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
HUB_TIMEOUT_S = 5.0  # one request, no retries: an unreachable hub is told in seconds


def model_found(config: RunConfig) -> tuple[str, list[str]]:
    """A local folder must hold a config, weights and a tokenizer; a hub id must be in the
    local Hugging Face cache, or on a hub that answers one request within HUB_TIMEOUT_S
    (transformers would otherwise retry for a minute before it fails)."""
    path = config.model_path()
    folder = Path(path)
    if folder.is_dir():
        weights = [p for pattern in WEIGHT_FILES for p in folder.glob(pattern)]
        missing = [
            n
            for n, ok in (
                ("config.json", (folder / "config.json").is_file()),
                ("weights (*.safetensors)", bool(weights)),
                ("tokenizer", any((folder / n).is_file() for n in TOKENIZER_FILES)),
            )
            if not ok
        ]
        if missing:
            return "", [
                f"model.path: {path} has no {' and no '.join(missing)}; point it to a "
                "model folder (save_pretrained of the model and its tokenizer writes them)"
            ]
        if config.model.revision is not None:
            return "", [
                f"model.revision: {config.model.revision} is for a hub id, and model.path "
                f"{path} is a local folder; remove model.revision"
            ]
        return f"{path} (local folder)", []
    if folder.exists():
        return "", [f"model.path: {path} is a file; point it to a model folder or a hub id"]
    if path.startswith((".", "/", "~")) or path.count("/") > 1:
        return "", [f"model.path: no folder {path}; check the path"]
    from huggingface_hub import try_to_load_from_cache

    revision = config.model.revision
    try:
        cached = try_to_load_from_cache(path, "config.json", revision=revision)
    except Exception:  # not a valid hub id either
        return "", [f"model.path: {path} is neither a folder nor a hub id; check it"]
    at = f" at {revision}" if revision else ""
    if isinstance(cached, str):
        return f"{path}{at} (in the Hugging Face cache)", []
    option = f" --revision {revision}" if revision else ""
    fix = f"download it (hf download {path}{option}) or point model.path to a model folder"
    offline = [v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if _is_true(v)]
    if offline:
        return "", [
            f"model.path: {path}{at} is not in the local Hugging Face cache and {offline[0]} "
            f"is set; {fix}"
        ]
    problem = _hub_problem(path, revision)
    if problem:
        return "", [f"model.path: {path}{at} is not in the local Hugging Face cache and {problem}"]
    return f"{path}{at} (on the hub: downloaded at start)", []


def _is_true(variable: str) -> bool:
    return os.environ.get(variable, "").strip().lower() in ("1", "true", "yes", "on")


@functools.cache  # asked once per process (a comparison's pairs, the CLI then the run)
def _hub_problem(model_id: str, revision: str | None = None) -> str | None:
    """Why the hub cannot give `model_id` at `revision` (one request, no retries), or None."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        HfApi().model_info(model_id, revision=revision, timeout=HUB_TIMEOUT_S)
    except RevisionNotFoundError:
        return f"the hub has no revision {revision} of it; check model.revision"
    except GatedRepoError:
        return "the hub's copy is gated; accept its terms on the hub and log in (hf auth login)"
    except RepositoryNotFoundError:
        return "the hub has no such model (or it is private: hf auth login); check the id"
    except Exception as error:  # no network, DNS, a proxy, a timeout
        why = str(error).splitlines()[0] if str(error) else type(error).__name__
        return (
            f"the hub ({constants.ENDPOINT}) does not answer ({why}); download it where there "
            f"is a network (hf download {model_id}) and copy the cache, or point model.path to "
            "a model folder"
        )
    return None
