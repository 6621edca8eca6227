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


def config_fields(config: dict[str, Any]) -> dict[str, Any]:
    """A config as "section.field" -> value, one level deep: a mapping field (such as
    task.eval_sets) stays one value, so it can be passed back as an override and compared
    whole. {"task": {"eval_sets": {"a": 2}}, "output": "runs"} ->
    {"task.eval_sets": {"a": 2}, "output": "runs"}."""
    fields: dict[str, Any] = {}
    for section, values in config.items():
        if isinstance(values, dict):
            fields.update({f"{section}.{name}": value for name, value in values.items()})
        else:
            fields[section] = values
    return fields
