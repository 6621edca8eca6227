"""`rvctl export`: a checkpoint's weights as a Hugging Face model folder (config, tokenizer,
safetensors) that transformers and vLLM load as they load any model.

rvctl export runs/rollverify-s0-20261201-171420 --out models/my-policy [--step 40]

The weights are the trainer's (the engines get them by weight sync); the config and tokenizer
are the run's base model's (training changes neither). The folder is written beside --out
and renamed into place: it is whole or absent. Only the checkpoint's weights are read (an
8B checkpoint's optimizer moments are four times its weights); a sharded run's parts, one per
rank, are put together here into one model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from rollverify.training.checkpoint.files import (
    MANIFEST,
    folder_for,
    group_files,
    matches_manifest,
    read_group,
    steps,
)


def export(run_dir: Path, out: Path, step: int | None = None) -> Path:
    """Write the weights of `run_dir`'s checkpoint of `step` (default: the newest whole one)
    to a model folder at `out`; return the checkpoint folder read."""
    from rollverify.config import load_config
    from rollverify.infra.nested_dicts import config_fields
    from rollverify.training.run_folder import find_run

    run_dir = find_run(run_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out}: exists and is not an empty folder; pick a new path")
    folder = _checkpoint(run_dir, step)
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    config = load_config(overrides=config_fields(saved))
    temporary = out.with_name(f".{out.name}.export-tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        _write_model(config, folder, temporary)
        if out.exists():
            out.rmdir()  # (empty: checked above)
        temporary.rename(out)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return folder


def _checkpoint(run_dir: Path, step: int | None) -> Path:
    root = run_dir / "checkpoints"
    if step is not None:
        folder = folder_for(root, step)
        have = steps(root)
        if step not in have:
            raise ValueError(
                f"--step {step}: {run_dir} has no checkpoint of that step (it has: "
                f"{', '.join(map(str, have)) or 'none'})"
            )
        problem = _model_problem(folder)
        if problem:
            raise ValueError(f"--step {step}: the checkpoint's model file {problem}")
        return folder
    for folder in [folder_for(root, saved) for saved in reversed(steps(root))]:
        if _model_problem(folder) is None:
            return folder
    raise ValueError(f"RUN_DIR {run_dir}: no whole checkpoint yet; train it further first")


def _model_problem(folder: Path) -> str | None:
    """None if the files of the checkpoint's weights (one, or each rank's part) match the
    manifest; else what is wrong with the first that does not."""
    for name in group_files(folder, "model"):
        problem = matches_manifest(folder, name)
        if problem:
            return f"{name} {problem}" if "/" in name else problem
    return None


def _write_model(config, folder: Path, target: Path) -> None:
    """The base model's config and tokenizer with the checkpoint's weights, built on the
    meta device (no second copy of the weights in memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from rollverify.infra.hub import model_folder

    base = model_folder(config.model_path(), config.model.revision)  # (the pinned revision's)
    model_config = AutoConfig.from_pretrained(base)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(
            model_config, dtype=getattr(torch, config.model.dtype)
        )
    weights = read_group(folder, "model")
    model.load_state_dict(weights, assign=True, strict=True)
    model.tie_weights()
    model.save_pretrained(target, safe_serialization=True)
    AutoTokenizer.from_pretrained(base).save_pretrained(target)
    step = json.loads((folder / MANIFEST).read_text())["step"]
    (target / "rollverify_export.json").write_text(
        json.dumps({"checkpoint": str(folder.resolve()), "step": step}, indent=2) + "\n"
    )
