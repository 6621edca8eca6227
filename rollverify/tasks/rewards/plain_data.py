"""Plain data as JSON, the only thing that crosses between the tests and the program under test
(rollverify/tasks/rewards/judge.py and candidate_server.py): None, booleans, numbers (int,
float with nan and inf, complex), strings, bytes, lists, tuples, dicts, sets and frozensets,
nested, and opaque references to objects the program keeps (`Reference`).

JSON arrays are lists; every other container is an object with one tag:
{"tuple": [...]}, {"dict": [[key, value], ...]}, {"set": [...]}, {"frozenset": [...]},
{"bytes": "hex"}, {"complex": [re, im]}, {"ref": n}, and, from the tests to the program only, a
builtin by its name, {"builtin": "int"} (MBPP passes types: remove_datatype(t, int)).

`decode` is the trusted side's: it builds only values of those exact types from what it reads
(anything else raises NotPlain), so no object of the program's can reach a comparison the tests
make. This module is sent into the sandbox too (the server's copy): it imports only the
standard library and no `__future__`.
"""

import builtins
import json

MAX_DEPTH = 64
TAGS = ("tuple", "dict", "set", "frozenset", "bytes", "complex", "ref")


class NotPlain(Exception):
    """A value (or a message) that is not plain data."""


class Reference:
    """An object the program keeps (an instance of a class it defines), known to the tests by
    its number only: it equals itself alone, has no length, no attributes and no order, and
    can only be passed back to the program's functions."""

    __slots__ = ("number",)

    def __init__(self, number):
        self.number = number

    def __repr__(self):
        return f"<the program's object #{self.number}>"


def encode(value, references=None, depth=0):
    """`value` as JSON-able data; a Reference as its number; NotPlain for anything else
    (exact types only: what a subclass means is the sender's to decide)."""
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value  # json writes nan and inf as NaN and Infinity, and reads them back
    if kind is list:
        return [encode(item, references, depth + 1) for item in value]
    if kind in (tuple, set, frozenset):
        items = [encode(item, references, depth + 1) for item in value]
        return {kind.__name__: items}
    if kind is dict:
        pairs = [
            [encode(k, references, depth + 1), encode(v, references, depth + 1)]
            for k, v in value.items()
        ]
        return {"dict": pairs}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is complex:
        return {"complex": [value.real, value.imag]}
    if kind is Reference:
        return {"ref": value.number}
    if _is_builtin(value):
        return {"builtin": value.__name__}
    raise NotPlain(f"a {kind.__name__} is not plain data")


def decode(data, references=True, builtins_too=False):
    """The plain value `data` (json.loads's output) stands for; NotPlain if it is not one,
    whatever is wrong with it (bad hex, a complex too large: a sender's fault, never the
    reader's crash). references: whether a Reference may appear; builtins_too: a builtin by
    its name (the program's side: what the tests pass)."""
    try:
        return _decoded(data, references, 0, builtins_too)
    except NotPlain:
        raise
    except Exception as error:
        raise NotPlain(f"not an encoding of plain data ({type(error).__name__})") from None


def _decoded(data, references, depth, builtins_too):
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is list:
        return [_decoded(item, references, depth + 1, builtins_too) for item in data]
    if kind is not dict or len(data) != 1:
        raise NotPlain(f"not an encoding of plain data: a {kind.__name__}")
    ((tag, body),) = data.items()
    if tag == "ref" and references and type(body) is int:
        return Reference(body)
    if tag == "builtin" and builtins_too and _is_builtin(getattr(builtins, str(body), None)):
        return getattr(builtins, body)
    if tag == "bytes" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "complex" and type(body) is list and len(body) == 2:
        return complex(*(_number(part) for part in body))
    if tag in ("tuple", "set", "frozenset", "dict") and type(body) is list:
        items = [_decoded(item, references, depth + 1, builtins_too) for item in body]
        return _container(tag, items)
    raise NotPlain(f"not an encoding of plain data: tag {tag!r}")


def _container(tag, items):
    try:
        if tag == "tuple":
            return tuple(items)
        if tag == "dict":
            if not all(type(pair) is list and len(pair) == 2 for pair in items):
                raise NotPlain("a dict's items are [key, value] pairs")
            return dict(items)
        return set(items) if tag == "set" else frozenset(items)
    except TypeError as error:  # an unhashable key or member
        raise NotPlain(str(error)) from None


def _is_builtin(value):
    """A builtin type or function (int, str, len), which the tests may pass as an argument."""
    name = getattr(value, "__name__", None)
    return isinstance(name, str) and getattr(builtins, name, None) is value and callable(value)


def _number(value):
    if type(value) not in (int, float):
        raise NotPlain("a complex's parts are numbers")
    return value


def dumps(message):
    """One message as one line of JSON (bytes)."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def loads(line):
    """The message of one line; NotPlain if it is not JSON."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as error:
        raise NotPlain(f"not a message: {type(error).__name__}") from None
