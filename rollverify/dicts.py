"""Pure helpers over nested dicts (no imports beyond the standard library)."""

from __future__ import annotations

from typing import Any


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"train": {"steps": 3}} -> {"train.steps": 3}."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
