"""A config section built from its YAML mapping: unknown keys named with the nearest known one,
each value checked against its type hint and its field's rule (field.py)."""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any, Literal

# Fields that were renamed: an old config is told the new name.
RENAMED = {"train.devices": "train.processes"}


def build_section(cls: type, data: Any, prefix: str, problems: list[str]) -> Any:
    if data is None and prefix:  # an empty section ("train:" and nothing under it)
        data = {}
    if not isinstance(data, dict):
        problems.append(f"{prefix.rstrip('.')}: must be a mapping, got {_show(data)}")
        return cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in data:
        if f"{prefix}{key}" in RENAMED:
            problems.append(f"{prefix}{key}: renamed {RENAMED[f'{prefix}{key}']}; use that name")
        elif key not in fields:
            near = difflib.get_close_matches(str(key), fields, n=1)
            hint = f"; did you mean {prefix}{near[0]}?" if near else f"; known: {', '.join(fields)}"
            name = str(key) if str(key).isprintable() and str(key).strip() else repr(key)
            problems.append(f"{prefix}{name}: unknown key{hint}")
    values = {}
    for name, f in fields.items():
        if name not in data:
            continue
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            values[name] = build_section(hint, data[name], f"{prefix}{name}.", problems)
            continue
        value, problem = _coerce(data[name], hint)
        infinite = problem is None and isinstance(value, float) and math.isinf(value)
        if infinite and not f.metadata.get("allow_inf"):
            problem = f"must be finite, got {_show(value)}"
        if problem:
            problems.append(f"{prefix}{name}: {problem}")
            continue
        check, rule = f.metadata.get("check"), f.metadata.get("rule")
        if check is not None and not check(value):
            problems.append(
                f"{prefix}{name}: must be {rule}, got {_show(value)}{_near(value, rule)}"
            )
            continue
        values[name] = value
    try:
        return cls(**values)
    except TypeError:  # only reachable if a nested section failed; its problem is recorded
        return cls()


def _coerce(value: Any, hint: Any) -> tuple[Any, str | None]:
    """Check `value` against a type hint; YAML's "inf"/".inf" strings become float('inf')."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None, None
        inner = [a for a in args if a is not type(None)]
        problems = []
        for alternative in inner:  # the first that takes the value (ds: a number or auto)
            coerced, problem = _coerce(value, alternative)
            if problem is None:
                return coerced, None
            problems.append(problem)
        if len(inner) == 1:
            return None, problems[0]
        return None, f"must be {' or '.join(map(_kind, inner))}, got {_show(value)}"
    if origin is Literal:
        if value in args:
            return value, None
        near = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
        hint_text = f"; did you mean {near[0]!r}?" if near else ""
        return None, f"must be one of {', '.join(map(str, args))}, got {_show(value)}{hint_text}"
    if origin is list:  # list[V]: each item checked as V
        if not isinstance(value, list):
            return None, f"must be a list, got {_show(value)}"
        checked_items = []
        for index, item in enumerate(value):
            coerced, problem = _coerce(item, args[0])
            if problem:
                return None, f"item {index}: {problem}"
            checked_items.append(coerced)
        return checked_items, None
    if origin is dict:  # dict[str, V]: a mapping of names to values, each checked as V
        if not isinstance(value, dict):
            return None, f"must be a mapping of names to values, got {_show(value)}"
        checked = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key.strip():
                return None, f"names must be non-empty strings, got {_show(key)}"
            checked[key], problem = _coerce(item, args[1])
            if problem:
                return None, f"{key}: {problem}"
        return checked, None
    if hint is bool:
        return (
            (value, None)
            if isinstance(value, bool)
            else (None, f"must be true or false, got {_show(value)}")
        )
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value, None
        return None, f"must be an integer, got {_show(value)}"
    if hint is float:
        # YAML 1.1 reads 1e-3 (no dot) as a string and spells infinity .inf: accept both.
        text = value.strip().lower().lstrip(".") if isinstance(value, str) else None
        try:
            number = float(text) if text is not None else float(value)
        except (TypeError, ValueError, OverflowError):
            return None, f"must be a number, got {_show(value)}"
        if isinstance(value, bool) or math.isnan(number):
            return None, f"must be a number, got {_show(value)}"
        return number, None
    if hint is str:
        return (
            (value, None)
            if isinstance(value, str)
            else (None, f"must be a string, got {_show(value)}")
        )
    return value, None


def _kind(hint: Any) -> str:
    """A type hint as a value's description: float -> "a number", Literal["auto"] -> "auto"."""
    if typing.get_origin(hint) is Literal:
        return " or ".join(map(str, typing.get_args(hint)))
    return {float: "a number", int: "an integer", bool: "true or false", str: "a string"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


def _near(value: Any, rule: str) -> str:
    """ "; did you mean X?" for a name close to one of a rule's "one of a, b, c" names."""
    if not isinstance(value, str) or not rule.startswith("one of "):
        return ""
    near = difflib.get_close_matches(value, [n.strip() for n in rule[7:].split(",")], n=1)
    return f"; did you mean {near[0]}?" if near else ""


def _show(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
