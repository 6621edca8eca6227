"""The program's side of its unit tests: it runs in the sandbox, as untrusted as the program.

`server_program` is what the sandbox runs: this file and plain_data.py as one script, then
`serve(program, setup)`. It runs the program (and the tests' setup, which may build inputs
from the program's classes), then answers the judge (judge.py, outside the sandbox) on its
stdin and stdout, one JSON line each way: what a name is, and what a call returned. Nothing
here decides a test: whatever this process says, the judge reads plain data only, so a
program that rewrites this file's functions can only change what its own functions return.

What it reports besides, to be counted as tampering (it can be silenced, never turned into a
pass): builtins the program replaced, an exit in the program or a call, and a returned object
of the program's whose class redefines comparison.
"""

import builtins
import os
from pathlib import Path

from rollverify.tasks.rewards.plain_data import (  # sandbox: inlined
    NotPlain,
    Reference,
    decode,
    dumps,
    encode,
    loads,
)

PLAIN = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)
COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__")
INLINED = "# sandbox: inlined"


def server_program(program, setup):
    """The script the sandbox runs for `program` and its tests' `setup`."""
    here = Path(__file__)
    parts = [here.with_name("plain_data.py").read_text(), here.read_text()]
    source = "\n".join(_without_inlined_imports(part) for part in parts)
    return f"{source}\n\nserve({program!r}, {setup!r})\n"


def _without_inlined_imports(source):
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if line.endswith(INLINED)), None)
    if start is None:
        return source
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith(")"))
    return "\n".join(lines[:start] + lines[end + 1 :])


def serve(program, setup):
    channel = os.fdopen(os.dup(1), "wb")  # the judge's; the program's prints go nowhere
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    requests = os.fdopen(0, "rb")
    before = dict(vars(builtins))
    namespace = {"__name__": "solution"}
    failed = _run(program, setup, namespace)
    if failed is not None:
        _send(channel, failed)
        return
    patched = sorted(
        n for n in {*before, *vars(builtins)} if vars(builtins).get(n) is not before.get(n)
    )
    _send(channel, {"ready": True, "patched": patched})
    objects = []
    for line in requests:
        _send(channel, _answer(loads(line), namespace, objects))


def _send(channel, message):
    channel.write(dumps(message))
    channel.flush()


def _run(program, setup, namespace):
    """None if the program and the setup ran, else the message that says why not."""
    try:
        exec(compile(program, "solution.py", "exec"), namespace)
        if setup:
            exec(compile(setup, "setup.py", "exec"), namespace)
    except Exception as error:
        return {"failed": _why(error)}
    except BaseException as error:  # SystemExit, KeyboardInterrupt: an exit before the tests
        return {"failed": _why(error), "exited": True}
    return None


def _answer(request, namespace, objects):
    if "look" in request:
        found = {}
        for name in request["look"]:
            if name in namespace:
                found[name] = _describe(namespace[name], objects)
        return {"found": found}
    function = namespace.get(request["call"])
    try:
        args = _resolved(decode(request["args"], builtins_too=True), objects)
        kwargs = _resolved(decode(request["kwargs"], builtins_too=True), objects)
        value = function(*args, **kwargs)
    except Exception as error:
        return {"raised": [type(error).__name__, str(error)[:300]]}
    except BaseException as error:
        return {"exited": type(error).__name__}
    return _returned(value, objects, isinstance(function, type))


def _describe(value, objects):
    if isinstance(value, type):
        return ["class"]
    if callable(value):
        return ["function"]
    if type(value).__name__ == "module":
        return ["module", value.__name__]
    returned = _returned(value, objects, True)
    return ["value", returned["returned"]] if "returned" in returned else ["none"]


def _returned(value, objects, may_keep):
    """The reply for a returned `value`: plain data, a reference where `may_keep` (a class's
    instance), else what it is."""
    try:
        return {"returned": encode(_plain(value))}
    except NotPlain as why:
        if may_keep and type(value).__module__ == "solution":
            objects.append(value)
            return {"returned": {"ref": len(objects) - 1}}
        return {"unplain": str(why), "compares": _compares_as_it_likes(type(value))}


def _plain(value, depth=0):
    """`value` with every subclass of a plain type made that type (a Counter a dict, a
    namedtuple a tuple); NotPlain for anything else, or for a class of the program's that
    redefines comparison."""
    if depth > 64:
        raise NotPlain("nested too deep")
    kind = next((t for t in type(value).__mro__ if t in PLAIN), None)
    if value is None:
        return None
    if kind is None or _compares_as_it_likes(type(value)):
        raise NotPlain(f"a {type(value).__name__} is not plain data")
    if kind in (list, tuple, set, frozenset):
        return kind(_plain(item, depth + 1) for item in value)
    if kind is dict:
        return {_plain(k, depth + 1): _plain(v, depth + 1) for k, v in value.items()}
    return kind(value)


def _compares_as_it_likes(kind):
    """A class of the program's (or a subclass of a plain type) that defines comparison."""
    for cls in kind.__mro__:
        if cls in PLAIN or cls is object:
            return False
        if any(name in vars(cls) for name in COMPARISONS) and cls.__module__ == "solution":
            return True
    return False


def _resolved(value, objects):
    """Decoded arguments with each Reference the object it stands for."""
    if type(value) is Reference:
        return objects[value.number]
    if type(value) in (list, tuple):
        return type(value)(_resolved(item, objects) for item in value)
    if type(value) is dict:
        return {k: _resolved(v, objects) for k, v in value.items()}
    return value


def _why(error):
    text = " ".join(str(error).split())
    return "program: " + type(error).__name__ + (": " + text[:300] if text else "")
