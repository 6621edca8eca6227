"""The program's side of its unit tests: it runs in the sandbox, as untrusted as the program.

`server_program` is what the sandbox runs: this file and plain_data.py as one script, then
`serve(program, setup)`. It runs the program (and the tests' setup, which may build inputs
from the program's classes), then answers the judge (judge.py, outside the sandbox) on its
stdin and stdout, one JSON line each way: what a name is, and what a call returned. Nothing
here decides a test: whatever this process says, the judge reads plain data only, so a
program that rewrites this file's functions can only change what its own functions return.

What it reports besides, to be counted as tampering (it can be silenced, never turned into a
pass): builtins the program replaced, an exit in the program or a call, a trace or profile
function it set (which could rewrite what this reports), and a returned object whose class
redefines comparison and did not exist before the program ran (by identity: a class cannot
pass for the standard library's by its `__module__`). What it says goes out through an
encoder made before the program runs, of C parts (json's encoder, os.write): patching
`json.dumps` does not reach it. A program that rewrites this server's globals or frames
(ctypes, a frame's f_trace) can still silence the count.
"""

import builtins
import json
import os
import sys
from pathlib import Path

from rollverify.tasks.rewards.plain_data import (  # sandbox: inlined
    NotPlain,
    Reference,
    decode,
    encode,
    loads,
)

PLAIN = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)
PLAIN_IDS = frozenset(map(id, PLAIN))  # by identity: a metaclass's __eq__ cannot match one
COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__")
INLINED = "# sandbox: inlined"
_TYPE_MRO = type.__dict__["__mro__"].__get__  # a class's real MRO and dict (not a
_TYPE_DICT = type.__dict__["__dict__"].__get__  # metaclass's property of that name)
# Taken before the program runs (it may replace sys's); C functions, which no tracer can step.
_GETTRACE, _GETPROFILE, _SETTRACE, _SETPROFILE = (
    sys.gettrace,
    sys.getprofile,
    sys.settrace,
    sys.setprofile,
)


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
    send = _sender(os.dup(1))  # the judge's channel; the program's prints go nowhere
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    requests = os.fdopen(0, "rb")
    before = dict(vars(builtins))
    standard = _every_class()  # the classes there are before the program runs
    namespace = {"__name__": "solution"}
    failed = _run(program, setup, namespace)
    traced = _stop_tracing()
    if failed is not None:
        send(failed)
        return
    patched = sorted(
        n for n in {*before, *vars(builtins)} if vars(builtins).get(n) is not before.get(n)
    )
    send({"ready": True, "patched": patched, "traced": traced})
    objects = []
    for line in requests:
        send(_answer(loads(line), namespace, objects, standard))


def _sender(fd):
    """A send on `fd` of one message as one JSON line, made of C parts taken now (before the
    program runs): json's C encoder, str.join, os.write."""
    encoder = getattr(json.encoder, "c_make_encoder", None)
    if encoder is None:  # (no _json here: the pure Python one, patchable)
        encoder = json.JSONEncoder(separators=(",", ":")).iterencode
    else:
        escape = json.encoder.c_encode_basestring_ascii
        encoder = encoder(None, _not_json, escape, None, ":", ",", False, False, True)
    join, write = "".join, os.write

    def send(message):
        data = (join(encoder(message, 0)) + "\n").encode()
        while data:
            data = data[write(fd, data) :]

    return send


def _not_json(value):
    raise TypeError(f"a {type(value).__name__} in a message")


def _stop_tracing():
    """Whether the program left a trace or profile function (which can rewrite this server's
    locals, and so what it reports); both are cleared, in one line (no tracer steps it)."""
    found = [_GETTRACE(), _GETPROFILE(), _SETTRACE(None), _SETPROFILE(None)]
    return found[0] is not None or found[1] is not None


def _every_class():
    """Every class there is now, by identity (kept, so that no id is reused)."""
    found, pending = {}, [object]
    while pending:
        kind = pending.pop()
        if id(kind) not in found:
            found[id(kind)] = kind
            pending += type.__subclasses__(kind) if kind is not type else []
    return found


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


def _answer(request, namespace, objects, standard):
    if "look" in request:
        found = {}
        for name in request["look"]:
            if name in namespace:
                found[name] = _describe(namespace[name], objects, standard)
        return {"found": found}
    function = namespace.get(request["call"])
    try:
        args = _resolved(decode(request["args"], builtins_too=True), objects)
        kwargs = _resolved(decode(request["kwargs"], builtins_too=True), objects)
        value = function(*args, **kwargs)
    except (Exception, GeneratorExit, KeyboardInterrupt) as error:  # the judge: its error
        return {"raised": [type(error).__name__, str(error)[:300]], "traced": _stop_tracing()}
    except BaseException as error:
        return {"exited": type(error).__name__, "traced": _stop_tracing()}
    traced = _stop_tracing()
    return _returned(value, objects, isinstance(function, type), standard) | {"traced": traced}


def _describe(value, objects, standard):
    if isinstance(value, type):
        return ["class"]
    if callable(value):
        return ["function"]
    if type(value).__name__ == "module":
        return ["module", value.__name__]
    returned = _returned(value, objects, True, standard)
    return ["value", returned["returned"]] if "returned" in returned else ["none"]


def _returned(value, objects, may_keep, standard):
    """The reply for a returned `value`: plain data, a reference where `may_keep` (a class's
    instance), else what it is."""
    try:
        return {"returned": encode(_plain(value, standard))}
    except NotPlain as why:
        if may_keep and type(value).__module__ == "solution":
            objects.append(value)
            return {"returned": {"ref": len(objects) - 1}}
        return {"unplain": str(why), "compares": _compares_as_it_likes(type(value), standard)}


def _plain(value, standard, depth=0):
    """`value` with every subclass of a plain type made that type (a Counter a dict, a
    namedtuple a tuple); NotPlain for anything else, or for a class of the program's that
    redefines comparison."""
    if depth > 64:
        raise NotPlain("nested too deep")
    kind = next((t for t in _mro(type(value)) if id(t) in PLAIN_IDS), None)
    if value is None:
        return None
    if kind is None or _compares_as_it_likes(type(value), standard):
        raise NotPlain(f"a {type(value).__name__} is not plain data")
    if kind in (list, tuple, set, frozenset):
        return kind(_plain(item, standard, depth + 1) for item in value)
    if kind is dict:
        return {
            _plain(k, standard, depth + 1): _plain(v, standard, depth + 1) for k, v in value.items()
        }
    return kind(value)


def _compares_as_it_likes(kind, standard):
    """A class (or a subclass of a plain type) that defines comparison in a class that did
    not exist before the program ran (`standard`: Counter's is the standard library's)."""
    for cls in _mro(kind):
        if id(cls) in PLAIN_IDS or cls is object:
            return False
        own = _TYPE_DICT(cls)
        if id(cls) not in standard and any(name in own for name in COMPARISONS):
            return True
    return False


def _mro(kind):
    """What `kind` is, whatever its metaclass says: type's own descriptor of __mro__."""
    return _TYPE_MRO(kind)


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
