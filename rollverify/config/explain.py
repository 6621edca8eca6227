"""Each config field's documentation, type, default and allowed values, from the dataclasses
that define them (`rvctl config explain`, `rvctl config show -f table`)."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from rollverify.config.run_config import RunConfig


@dataclass(frozen=True)
class FieldDoc:
    name: str  # dotted: "verify.ds"
    type: str
    default: Any
    allowed: str  # the rule, or the choices of a Literal; "" when any value of the type is
    doc: str


def field_docs() -> dict[str, FieldDoc]:
    """Every field of the config by its dotted name, in the config's order."""
    docs = {}
    hints = typing.get_type_hints(RunConfig)
    for top in dataclasses.fields(RunConfig):
        hint = hints[top.name]
        if dataclasses.is_dataclass(hint):
            section_hints = typing.get_type_hints(hint)
            for field in dataclasses.fields(hint):
                name = f"{top.name}.{field.name}"
                docs[name] = _doc(name, field, section_hints[field.name])
        else:
            docs[top.name] = _doc(top.name, top, hint)
    return docs


def explain(name: str) -> list[FieldDoc]:
    """The field `name`, or every field of section `name`; ValueError naming the nearest."""
    docs = field_docs()
    if name in docs:
        return [docs[name]]
    section = [doc for field, doc in docs.items() if field.startswith(f"{name}.")]
    if section:
        return section
    sections = {field.split(".")[0] for field in docs}
    near = difflib.get_close_matches(name, [*docs, *sections], n=1)
    hint = f"; did you mean {near[0]}?" if near else "; rvctl config explain lists them all"
    raise ValueError(f"config explain: no field or section {name}{hint}")


def _doc(name: str, field: dataclasses.Field, hint: Any) -> FieldDoc:
    if field.default is not dataclasses.MISSING:
        default = field.default
    elif field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
    else:
        default = None
    choices = _choices(hint)
    allowed = ", ".join(map(str, choices)) if choices else field.metadata.get("rule", "")
    return FieldDoc(name, _type_name(hint), default, allowed, field.metadata.get("doc", ""))


def _choices(hint: Any) -> tuple:
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) != 1 or typing.get_origin(args[0]) is not Literal:
        return ()  # a number or a choice (ds: a number or auto): the rule says which
    return (*typing.get_args(args[0]), None)


def _type_name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "choice"
    if origin in (typing.Union, types.UnionType):
        inner = " or ".join(_member_name(a) for a in args if a is not type(None))
        return f"{inner} or null" if type(None) in args else inner
    if origin is dict:
        return "mapping"
    return getattr(hint, "__name__", str(hint))


def _member_name(hint: Any) -> str:
    """A union's member: a Literal beside a type by its values (ds: "float or auto")."""
    if typing.get_origin(hint) is Literal:
        return " or ".join(map(str, typing.get_args(hint)))
    return _type_name(hint)
