"""The tests' side: a trusted process outside the sandbox that runs a problem's unit tests
against stand-ins for the program's functions and decides each test's outcome.

    python -I -c BOOT TO_PROGRAM FROM_PROGRAM < job.json > verdict.json

The job is the tests, the problem's prefix (HumanEval's prompt: trusted, run here too, so that
its helpers such as `poly` or `encode_cyclic` are the prompt's and not the program's) and its
entry point. A name the tests read that neither the tests, the prefix (but the entry point) nor
the builtins define is the program's: a function or class becomes a stand-in whose calls cross
to the sandbox (candidate_server.py), a module of the program's is imported here by its name, a
value comes as plain data. Arguments go out and results come back as plain data only
(plain_data.py); an instance of a class of the program's comes back as an opaque Reference.

A test passes when it runs to its end without raising. It fails, whatever the test itself
catches, when a call got anything but plain data back, a message it did not ask for, or no
answer (the program ended). What the program did that way is reported as tampering (with
builtins it replaced and exits it made), for the caller to count.
"""

from __future__ import annotations

import builtins
import importlib
import json
import keyword
import os
import sys
import types

from rollverify.tasks.rewards.plain_data import NotPlain, decode, dumps, encode, loads

MAX_REPLY_BYTES = 8 * 2**20  # a larger answer fails its test (and ends the exchange)
DESCRIPTIONS = ("function", "class", "module", "value", "none")  # what the server says a name is
# Raised by a call, these would be taken for control flow, not a failure: a StopIteration in a
# map's or filter's function ends it (all(map(...)) is then true), StopAsyncIteration an
# `async for`; GeneratorExit and KeyboardInterrupt are no test's to catch.
CONTROL_FLOW = ("StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt")


class ProgramFailed(BaseException):
    """A call the program cannot answer with plain data. A BaseException, so that a test's
    `except Exception` does not swallow it (the test fails regardless: Judge.spoiled)."""


class CandidateError(Exception):
    """The program's function raised an exception that is not one of Python's own."""


class Judge:
    def __init__(self, to_program: int, from_program: int) -> None:
        self.requests = os.fdopen(to_program, "wb")
        self.replies = os.fdopen(from_program, "rb")
        self.tampering: list[str] = []
        self.ended = False  # the program stopped answering
        self.spoiled: str | None = None  # why the test in progress fails, whatever it caught

    def run(
        self, prefix: str, entry_point: str, tests: list[str], shadows: tuple[str, ...] = ()
    ) -> dict:
        """{"passed", "error" (the first failure), "tampering", "ended"}; `shadows`: builtins'
        names that are the program's here (UnitTests.shadows)."""
        ready = self._first_message()
        if ready is not None:
            return self._verdict(0, ready)
        namespace: dict = {"__name__": "tests"}
        try:
            exec(compile(prefix, "prompt.py", "exec"), namespace)
        except Exception as error:
            return self._verdict(0, f"tests: the prompt does not run: {_why(error)}")
        trusted = set(namespace) - {entry_point}
        self._bind(namespace, (_names_read(tests) | set(shadows)) - trusted)
        passed, errors = 0, []
        for number, test in enumerate(tests, 1):
            failure = self._run_test(test, number, namespace)
            passed += failure is None
            errors += [failure] if failure else []
        return self._verdict(passed, errors[0] if errors else "")

    def _run_test(self, test: str, number: int, namespace: dict) -> str | None:
        self.spoiled = None
        try:
            exec(compile(test, f"test_{number}.py", "exec"), namespace)
        except BaseException as error:
            return f"test {number}: {self.spoiled or _why(error)}"
        return f"test {number}: {self.spoiled}" if self.spoiled else None

    def _first_message(self) -> str | None:
        """None once the program is ready, else why no test can pass."""
        message = self._receive()
        if message is None:
            return "program: ended before the tests"
        if "failed" in message:
            if message.get("exited"):
                self.tampering.append("exited before the tests")
            return str(message["failed"])[:500]
        patched = message.get("patched")
        if message.get("ready") is not True or not isinstance(patched, list):
            return self._forged("a first message that is not the server's")
        if patched:
            self.tampering.append(f"replaced builtins: {', '.join(map(str, patched))[:200]}")
        self._traced(message)
        return None

    def _bind(self, namespace: dict, names: set[str]) -> None:
        """The program's names the tests read: stand-ins, modules and values."""
        reply = self._exchange({"look": sorted(names)})
        found = reply.get("found") if reply is not None else None
        if not isinstance(found, dict):
            return
        for name, what in found.items():
            if name in names and isinstance(what, list) and what:
                try:
                    value = self._bound(name, what)
                except Exception as error:  # a reply's fault is the program's
                    self._forged(f"a name {name!r} the judge cannot read ({_why(error)})")
                    return
                if value is not None:
                    namespace[name] = value

    def _bound(self, name: str, what: list):
        kind = what[0]
        if not any(kind == known and type(kind) is str for known in DESCRIPTIONS):
            raise ValueError(f"no description of the server's: {str(kind)[:50]}")
        if kind in ("function", "class"):
            return stand_in(self, name, kind == "class")
        module = kind == "module" and len(what) == 2 and what[1] == name
        if module and name in sys.stdlib_module_names:  # the standard library's, imported here
            return importlib.import_module(name)
        if kind == "value" and len(what) == 2:
            try:
                return decode(what[1])
            except NotPlain:
                self.tampering.append(f"a name {name!r} that is not plain data")
        return None

    def call(self, name: str, args: tuple, kwargs: dict, is_class: bool):
        """A stand-in's call: the program's answer as plain data, or the exception it raised."""
        try:
            request = {"call": name, "args": encode(list(args)), "kwargs": encode(kwargs)}
        except NotPlain as why:
            raise TypeError(f"an argument of {name}() is not plain data ({why})") from None
        reply = self._exchange(request)
        if reply is None:
            self._spoil("the program ended during the tests")
        try:
            outcome = self._outcome(name, reply, is_class)
        except Exception as error:  # whatever is wrong with a reply is the program's
            self._spoil(self._forged(f"an answer the judge cannot read ({_why(error)})"))
        if isinstance(outcome, _Raised):
            raise outcome.error
        return outcome

    def _outcome(self, name: str, reply: dict, is_class: bool):
        """The returned value, or the candidate's error as _Raised; ProgramFailed else."""
        self._traced(reply)
        if "returned" in reply:
            try:
                return decode(reply["returned"], references=is_class)
            except NotPlain as why:
                self._spoil(self._forged(f"an answer that is not plain data ({why})"))
        if "raised" in reply and _is_pair_of_strings(reply["raised"]):
            return _Raised(_candidates_error(*reply["raised"]))
        if "unplain" in reply:
            if reply.get("compares"):
                self.tampering.append("returned an object that compares as it likes")
            self._spoil(f"{name}() returned what is not plain data: {str(reply['unplain'])[:200]}")
        if "exited" in reply:
            self.tampering.append("exited in a call")
            self._spoil(f"{name}() exited ({str(reply['exited'])[:50]})")
        self._spoil(self._forged("an answer it was not asked for"))

    def _traced(self, message: dict) -> None:
        if message.get("traced"):
            self.tampering.append("set a trace or profile function (it can rewrite the server)")

    def _spoil(self, why: str):
        self.spoiled = self.spoiled or why
        raise ProgramFailed(why)

    def _forged(self, what: str) -> str:
        self.tampering.append(f"wrote {what}")
        self.ended = True  # the exchange is out of step: nothing it says counts any more
        return f"the program wrote {what}"

    def _exchange(self, request: dict) -> dict | None:
        if self.ended:
            return None
        try:
            self.requests.write(dumps(request))
            self.requests.flush()
        except OSError:  # it closed its stdin or ended
            self.ended = True
            return None
        return self._receive()

    def _receive(self) -> dict | None:
        line = self.replies.readline(MAX_REPLY_BYTES + 1) if not self.ended else b""
        if not line.endswith(b"\n"):  # the end, or an answer too long to read
            if line:
                self._forged(f"an answer over {MAX_REPLY_BYTES} bytes")
            self.ended = True
            return None
        try:
            message = loads(line)
        except NotPlain:
            self._forged("a line that is not a message")
            return None
        if not isinstance(message, dict):
            self._forged("a message of the wrong shape")
            return None
        return message

    def _verdict(self, passed: int, error: str) -> dict:
        return {"passed": passed, "error": error, "tampering": self.tampering, "ended": self.ended}


class _Raised:
    """The exception a call of the program's raised, to raise in the test."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def stand_in(judge: Judge, name: str, is_class: bool):
    """A function of the tests' namespace that calls the program's `name`."""

    def call(*args, **kwargs):
        return judge.call(name, args, kwargs, is_class)

    call.__name__ = call.__qualname__ = name
    return call


def _names_read(tests: list[str]) -> set[str]:
    """The names the tests' code reads (attributes too: a superset), but builtins, keywords
    and dunders."""
    names: set[str] = set()
    pending = [compile(test, "test.py", "exec") for test in tests]
    while pending:
        code = pending.pop()
        names.update(code.co_names)
        pending += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return {
        n
        for n in names
        if n.isidentifier()
        and not keyword.iskeyword(n)
        and not n.startswith("__")
        and not hasattr(builtins, n)
    }


def _candidates_error(kind: str, message: str) -> Exception:
    """Python's own exception of that name (a ValueError a test expects), but one a test
    would take for control flow (CONTROL_FLOW); else a CandidateError."""
    found = getattr(builtins, kind, None) if kind.isidentifier() else None
    is_exception = isinstance(found, type) and issubclass(found, Exception)
    if is_exception and kind not in CONTROL_FLOW:
        try:
            return found(message)
        except Exception:  # one that takes other arguments (UnicodeDecodeError)
            pass
    return CandidateError(f"{kind}: {message}" if message else kind)


def _is_pair_of_strings(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)


def _why(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return type(error).__name__ + (": " + text[:300] if text else "")


def main() -> None:
    job = json.load(sys.stdin)
    judge = Judge(int(sys.argv[1]), int(sys.argv[2]))
    verdict = judge.run(job["prefix"], job["entry_point"], job["tests"], job.get("shadows", ()))
    sys.stdout.write(json.dumps(verdict) + "\n")
    sys.stdout.flush()
    os._exit(0)  # whatever the tests started (threads) ends here
