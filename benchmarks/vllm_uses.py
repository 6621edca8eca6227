"""Every vLLM name the code of this project uses, read from its source (ast): what
benchmarks/vllm_compat.py looks for in each vLLM release.

Derived from the code (rollverify/, rvctl/), not written by hand:
- every `import vllm...` and `from vllm... import X`: the module, and X in it;
- attributes of those (a module's, a class's), read or assigned;
- attributes of values whose type the code annotates with a vLLM class (`self.llm: AsyncLLM`,
  `stats: IterationStats`), and one step further (`attribute of attribute`: the release's own
  annotation of that attribute gives its class, where it has one);
- calls of those: each keyword (a `**x` whose x is annotated with a TypedDict of ours: its
  fields; a `**x` otherwise: the keys the code stores into x), the positional count;
- methods of our subclasses of vLLM classes (`override`), and the base's abstract methods;
- the engine arguments rvctl sets or assumes (rollverify/config/passthrough.py: VLLM_OWNED,
  VLLM_DEFAULTS);
- names the code reaches by a string, marked `VLLMName` or `VLLMAlternatives`
  (rollverify/infra/vllm_versions.py);
- the plugin entry-point groups of pyproject.toml (`vllm.general_plugins`).
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CODE = ("rollverify", "rvctl")
ENGINE_ARGS = "vllm.engine.arg_utils.AsyncEngineArgs"
MARKERS = {"VLLMName": "name", "VLLMAlternatives": "one of"}


@dataclass
class Use:
    """One thing the code needs of vLLM. kind: module, name, attribute, call, override,
    abstract, engine argument, one of, entry point."""

    kind: str
    name: str  # a dotted vLLM path (a call's: the callable's)
    where: list[str] = field(default_factory=list)  # file:line
    keywords: list[str] = field(default_factory=list)  # call: keyword names given
    positional: int = 0  # call: positional arguments given
    splat: bool = False  # call: a **mapping whose keys are unknown (required ones not checked)
    parameters: list[str] = field(default_factory=list)  # override: what our method takes
    options: list[str] = field(default_factory=list)  # one of: the alternatives

    def key(self) -> tuple:
        return (self.kind, self.name, tuple(self.keywords), self.positional, self.splat)


# -- what the code uses ------------------------------------------------------------------------


class Scope:
    """Names bound in a module or function: to vLLM paths (imports) or to vLLM types
    (annotations), and the TypedDicts of ours."""

    def __init__(self, parent: Scope | None = None) -> None:
        self.parent = parent
        self.paths: dict[str, str] = {}  # name -> vllm path of a module or object
        self.types: dict[str, str] = {}  # name or self.attr -> vllm class path
        self.typed_dicts: dict[str, list[str]] = {}  # our TypedDict -> its fields
        self.stored_keys: dict[str, list[str]] = {}  # name -> keys stored by name["key"] = ...

    def lookup(self, table: str, name: str) -> Any:
        scope: Scope | None = self
        while scope is not None:
            found = getattr(scope, table).get(name)
            if found is not None:
                return found
            scope = scope.parent
        return None


class UseFinder(ast.NodeVisitor):
    """The vLLM uses of one file of ours."""

    def __init__(self, path: str, uses: dict[tuple, Use]) -> None:
        self.path = path
        self.uses = uses
        self.scope = Scope()
        self.class_types: dict[str, str] = {}  # self.attr -> vllm class, in the class in hand

    # bookkeeping
    def add(self, node: ast.AST, kind: str, name: str, **details: Any) -> None:
        use = Use(kind, name, **details)
        found = self.uses.setdefault(use.key(), use)
        found.where.append(f"{self.path}:{getattr(node, 'lineno', 0)}")

    # imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "vllm" or alias.name.startswith("vllm."):
                self.add(node, "module", alias.name)
                bound = alias.asname or alias.name.split(".")[0]
                self.scope.paths[bound] = alias.name if alias.asname else "vllm"

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or not (module == "vllm" or module.startswith("vllm.")):
            return
        self.add(node, "module", module)
        for alias in node.names:
            self.add(node, "name", f"{module}.{alias.name}")
            self.scope.paths[alias.asname or alias.name] = f"{module}.{alias.name}"

    # types from annotations
    def annotated(self, annotation: ast.expr | None) -> str | None:
        """The vLLM class an annotation names (X, X | None, Optional[X], "X"), if any."""
        if annotation is None:
            return None
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                return self.annotated(ast.parse(annotation.value, mode="eval").body)
            except SyntaxError:
                return None
        if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
            return self.annotated(annotation.left) or self.annotated(annotation.right)
        if isinstance(annotation, ast.Subscript) and _dotted(annotation.value) in (
            "Optional",
            "typing.Optional",
        ):
            return self.annotated(annotation.slice)
        dotted = _dotted(annotation)
        return self.resolve(dotted) if dotted else None

    def resolve(self, dotted: str) -> str | None:
        """The vLLM path a dotted name of ours stands for (an import), if any."""
        head, _, rest = dotted.partition(".")
        base = self.scope.lookup("paths", head)
        if base is None:
            return None
        return f"{base}.{rest}" if rest else base

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = [self.resolve(_dotted(b) or "") for b in node.bases]
        if any(_dotted(b) in ("TypedDict", "typing.TypedDict") for b in node.bases):
            self.scope.typed_dicts[node.name] = [
                s.target.id
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            ]
        outer, self.class_types = self.class_types, {}
        for statement in ast.walk(node):  # self.x: T anywhere in the class
            if isinstance(statement, ast.AnnAssign) and _is_self_attribute(statement.target):
                typed = self.annotated(statement.annotation)
                if typed:
                    self.class_types[f"self.{statement.target.attr}"] = typed
        for base in filter(None, bases):
            self.overrides(node, base)
        self.generic_visit(node)
        self.class_types = outer

    def overrides(self, node: ast.ClassDef, base: str) -> None:
        methods = [s for s in node.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)]
        for method in methods:
            arguments = [a.arg for a in method.args.posonlyargs + method.args.args][1:]
            arguments += [a.arg for a in method.args.kwonlyargs]
            if method.args.vararg or method.args.kwarg:
                arguments.append("*")
            self.add(method, "override", f"{base}.{method.name}", parameters=arguments)
        self.add(node, "abstract", base, parameters=[m.name for m in methods])

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer, self.scope = self.scope, Scope(self.scope)
        arguments = node.args
        for argument in arguments.posonlyargs + arguments.args + arguments.kwonlyargs:
            typed = self.annotated(argument.annotation)
            if typed:
                self.scope.types[argument.arg] = typed
            elif argument.annotation is not None:
                name = _dotted(argument.annotation)
                if name and self.scope.lookup("typed_dicts", name) is not None:
                    self.scope.types[argument.arg] = f"typeddict:{name}"
        for statement in ast.walk(node):  # x["key"] = ...: keys a **x splat passes on
            for target in getattr(statement, "targets", []):
                if (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.value, ast.Name)
                    and isinstance(target.slice, ast.Constant)
                    and isinstance(target.slice.value, str)
                ):
                    self.scope.stored_keys.setdefault(target.value.id, []).append(
                        target.slice.value
                    )
        self.generic_visit(node)
        self.scope = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        typed = self.annotated(node.annotation)
        if typed and isinstance(node.target, ast.Name):
            self.scope.types[node.target.id] = typed
        elif isinstance(node.target, ast.Name) and _dotted(node.annotation) in MARKERS:
            self.marked(node, MARKERS[_dotted(node.annotation)])
        self.generic_visit(node)

    def marked(self, node: ast.AnnAssign, kind: str) -> None:
        value = ast.literal_eval(node.value) if node.value is not None else None
        if kind == "name" and isinstance(value, str):
            self.add(node, "name", value)
        elif kind == "one of" and isinstance(value, tuple):
            self.add(node, "one of", " | ".join(value), options=list(value))

    # values, attributes and calls
    def type_of(self, node: ast.expr) -> tuple[str, str] | None:
        """('path', vllm path) for a module or object we imported, ('instance', vllm class)
        for a value typed by an annotation; None for anything else."""
        dotted = _dotted(node)
        if dotted in self.class_types:
            return "instance", self.class_types[dotted]
        if isinstance(node, ast.Name):
            typed = self.scope.lookup("types", node.id)
            if typed:
                return ("instance", typed) if not typed.startswith("typeddict:") else None
            path = self.scope.lookup("paths", node.id)
            return ("path", path) if path else None
        if isinstance(node, ast.Attribute):
            owner = self.type_of(node.value)
            if owner is None:
                return None
            if owner[0] == "path":
                return "path", f"{owner[1]}.{node.attr}"
            return "member", f"{owner[1]}.{node.attr}"  # an instance's attribute: type unknown
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        owner = self.type_of(node.value)
        if owner is not None and not (owner[0] == "instance" and isinstance(node.ctx, ast.Store)):
            kind = "attribute" if owner[0] != "member" else "attribute of attribute"
            self.add(node, kind, f"{owner[1]}.{node.attr}")
        self.generic_visit(node)

    def callee(self, func: ast.expr) -> str | None:
        found = self.type_of(func)
        if found is None or found[0] == "member" and "." not in found[1]:
            return None
        return found[1] if found[0] in ("path", "member") else None

    def visit_Call(self, node: ast.Call) -> None:
        callee = self.callee(node.func)
        if callee is not None:
            keywords, splat = [], False
            for keyword in node.keywords:
                if keyword.arg is not None:
                    keywords.append(keyword.arg)
                    continue
                fields = self.typed_dict_fields(keyword.value)
                if fields is None:  # keys unknown, but those the code stores into it
                    splat = True
                    if isinstance(keyword.value, ast.Name):
                        keywords += self.scope.lookup("stored_keys", keyword.value.id) or []
                else:
                    keywords += fields
            positional = sum(not isinstance(a, ast.Starred) for a in node.args)
            splat = splat or any(isinstance(a, ast.Starred) for a in node.args)
            self.add(
                node, "call", callee, keywords=sorted(keywords), positional=positional, splat=splat
            )
        self.generic_visit(node)

    def typed_dict_fields(self, value: ast.expr) -> list[str] | None:
        if isinstance(value, ast.Name):
            typed = self.scope.lookup("types", value.id)
            if typed and typed.startswith("typeddict:"):
                return self.scope.lookup("typed_dicts", typed.split(":", 1)[1])
        return None


def _dotted(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _is_self_attribute(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def used_names(root: Path = ROOT) -> list[Use]:
    """Every vLLM name the code under `root` uses (see the module docstring)."""
    uses: dict[tuple, Use] = {}
    for folder in CODE:
        for path in sorted((root / folder).rglob("*.py")):
            relative = str(path.relative_to(root))
            UseFinder(relative, uses).visit(ast.parse(path.read_text(), relative))
    for name in sorted(engine_arguments(root)):
        use = Use("engine argument", f"{ENGINE_ARGS}.{name}", ["rollverify/config/passthrough.py"])
        uses[use.key()] = use
    for group in entry_point_groups(root):
        use = Use("entry point", group, ["pyproject.toml"])
        uses[use.key()] = use
    return sorted(uses.values(), key=lambda u: (u.kind, u.name))


def engine_arguments(root: Path) -> set[str]:
    """The AsyncEngineArgs names rvctl sets or assumes (config/passthrough.py's tables)."""
    tree = ast.parse((root / "rollverify/config/passthrough.py").read_text())
    names: set[str] = set()
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in ("VLLM_OWNED", "VLLM_DEFAULTS"):
            value = ast.literal_eval(node.value)
            names |= set(value)
    return names


def entry_point_groups(root: Path) -> list[str]:
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return sorted(g for g in project.get("entry-points", {}) if g.startswith("vllm."))
