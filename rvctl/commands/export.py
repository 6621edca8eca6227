"""`rvctl export`: a run's checkpoint as a Hugging Face model folder."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer


def export(
    run_dir: Annotated[Path, typer.Argument(help="The run's folder (runs/<method>-s<seed>-...).")],
    out: Annotated[Path, typer.Option(help="The model folder to write (new or empty).")],
    step: Annotated[
        int | None, typer.Option(help="The checkpoint's step (default: the newest whole one).")
    ] = None,
) -> None:
    """Write a checkpoint's weights, with the base model's config and tokenizer, as a model
    folder that transformers and vLLM load (from_pretrained / LLM(model=...))."""
    from rollverify.training.checkpoint.export import (
        export as export_model,  # heavy: torch, transformers
    )

    folder = export_model(run_dir, out, step)
    print(f"wrote {out} from {folder}", file=sys.stderr)  # plain: rich would wrap the paths
