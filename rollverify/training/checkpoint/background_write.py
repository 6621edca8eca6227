"""A checkpoint written in a background thread (train.async_checkpoint), while training goes
on: safe because what it writes is a copy, taken at the step boundary (tensors cloned, the
JSON state deep-copied), that the next steps cannot touch. The files land atomically as
always (checkpoint_files.save); the run waits for the write before its next checkpoint, a
stop, and its end, and only then counts it as written."""

from __future__ import annotations

import copy
import threading
import time
import warnings
from pathlib import Path

import torch

from rollverify.training.checkpoint.files import Checkpoint
from rollverify.training.checkpoint.files import save as save_checkpoint


def detached(checkpoint: Checkpoint) -> Checkpoint:
    """A copy of `checkpoint` that shares no tensor or container with the live run. Tensors
    that share storage (tied weights) share their copy too."""
    copies: dict[tuple[int, int], torch.Tensor] = {}

    def copied(tensor: torch.Tensor) -> torch.Tensor:
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if key not in copies:
            copies[key] = tensor.detach().to("cpu", copy=True)
        return copies[key]

    return Checkpoint(
        checkpoint.step,
        tensors={
            group: {n: copied(t) for n, t in tensors.items()}
            for group, tensors in checkpoint.tensors.items()
        },
        state=copy.deepcopy(checkpoint.state),
        documents=copy.deepcopy(checkpoint.documents),
    )


class BackgroundWrite:
    def __init__(
        self, root: Path, checkpoint: Checkpoint, keep: int, temporary: Path | None = None
    ) -> None:
        """temporary: the folder the ranks wrote their parts into (a sharded run), else None."""
        self.step, self.folder, self.seconds = checkpoint.step, None, 0.0
        self.error: Exception | None = None
        # Not a daemon: a run that ends or is interrupted still finishes the write (atomic).
        self.thread = threading.Thread(
            target=self._write,
            args=(root, checkpoint, keep, temporary),
            name=f"checkpoint-{self.step}",
        )
        self.thread.start()

    def _write(self, root: Path, checkpoint: Checkpoint, keep: int, temporary: Path | None) -> None:
        start = time.perf_counter()
        try:
            self.folder = save_checkpoint(root, checkpoint, keep=keep, temporary=temporary)
        except Exception as error:  # a full disk: reported at the wait, the older ones kept
            self.error = error
        finally:
            self.seconds = time.perf_counter() - start

    def wait(self) -> Path | None:
        """The checkpoint's folder once written; None (with a warning) if the write failed."""
        self.thread.join()
        if self.error is not None:
            warnings.warn(f"checkpoint of step {self.step} not written: {self.error}", stacklevel=2)
        return self.folder
