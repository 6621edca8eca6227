"""Argument checks shared by the pure functions of the paper's rules.

They raise ValueError naming the argument and its value, so that a caller (or the CLI) can
print one line that says what to fix.
"""

from __future__ import annotations

import math

import torch


def check_same_shape(**tensors: torch.Tensor) -> None:
    """All tensors share one shape; the error names each argument with its shape."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"shapes must agree: {listed}")


def check_mask(mask: torch.Tensor, shape: torch.Size, name: str = "mask") -> None:
    """`mask` (the argument `name`) is a bool tensor of `shape` (True on generated tokens)."""
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} must be a bool tensor, got dtype {mask.dtype}")
    if mask.shape != shape:
        raise ValueError(f"shapes must agree: {name} {tuple(mask.shape)}, ops {tuple(shape)}")


def check_positive_threshold(name: str, value: float) -> float:
    """A verification threshold: a number > 0; `inf` disables its stage."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}={value!r} must be a number > 0 (inf disables the stage)")
    if math.isnan(value) or value <= 0:
        raise ValueError(f"{name}={value!r} must be > 0 (inf disables the stage)")
    return float(value)
