"""A config field that carries its documentation and its rule, so that `load_config` can check
every value and name the fix (coercion.py reads them)."""

from __future__ import annotations

import typing
from dataclasses import field
from typing import Any


def config_field(
    default: Any,
    doc: str,
    check: typing.Callable[[Any], bool] | None = None,
    rule: str = "",
    allow_inf: bool = False,
) -> Any:
    """A config field whose metadata carries its documentation and its rule."""
    metadata = {"doc": doc, "check": check, "rule": rule, "allow_inf": allow_inf}
    if isinstance(default, (dict, list)):  # a mutable default: each config gets its own copy
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def positive(x: float) -> bool:
    return x > 0


def positive_or_auto(x: float | str) -> bool:
    """A threshold: a number > 0, or "auto" (rollverify/core/auto_thresholds.py)."""
    return x == "auto" or (not isinstance(x, str) and x > 0)


def at_least_one(x: int) -> bool:
    return x >= 1
